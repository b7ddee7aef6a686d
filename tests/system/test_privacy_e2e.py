"""Sealed content and erasure end to end (docs/privacy.md): real ``serve`` and ``worker``
processes started with a master key, a spoken turn through the official openai SDK, then
``duplex-es erase``, on SQLite and PostgreSQL.

What a user would check: the question's words, the prompt, the answer's words and both sides'
audio are nowhere in the database (on SQLite: the file and its WAL, byte for byte) or in the
processes' logs; after the erasure the session still replays, audits and opens in the inspector,
showing what happened without what was said; and not even the master key opens it again."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa

from duplex_es.inspect import Inspector
from duplex_es.store import Database, EventLog
from duplex_es.store.datakeys import MasterKeys
from duplex_es_tools.conversation import speak_and_listen

from servers import running
from wsclient import WsClient

PROMPT = "Echo each phrase back, dear quartermaster."


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "DUPLEX_ES_MASTER_KEY_FILE": "", "DUPLEX_ES_CHAIN_KEY_FILE": ""}
    return subprocess.run([sys.executable, "-m", "duplex_es.cli.main", *args], capture_output=True, text=True, timeout=120, env=env)


def _stored(url: str, tmp_path: Path) -> bytes:
    """Every byte the database holds that could carry content: on SQLite the files themselves
    (main file, WAL, shared memory), on PostgreSQL every column of every table, read back."""
    if url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("log.db"))
    db = Database(url)
    out = []
    with db.read() as conn:
        for table in ("events", "snapshots", "session_keys", "ticks", "idempotency", "session_owners"):
            for row in conn.execute(sa.text(f"SELECT * FROM {table}")):
                out += [v.encode() if isinstance(v, str) else bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode() for v in row if v is not None]
    db.dispose()
    return b"\n".join(out)


def _logs(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.glob("*.log"))


def _words(text: str) -> set[bytes]:
    """The distinctive words of a text (five letters or more), as bytes."""
    return {w.lower().encode() for w in re.findall(r"[A-Za-z]{5,}", text)}


def _found(secrets: set[bytes], haystack: bytes) -> list[bytes]:
    low = haystack.lower()
    return sorted(s for s in secrets if s in low)


@pytest.mark.slow
def test_a_sealed_spoken_turn_leaves_nothing_readable_and_erases(db_url: str, tmp_path: Path, weather_pcm: bytes):
    url = db_url if not db_url.startswith("sqlite") else f"sqlite:///{tmp_path / 'log.db'}"
    key = tmp_path / "master.key"
    made = _cli("master-key", "new", str(key))
    assert made.returncode == 0 and oct(key.stat().st_mode & 0o777) == "0o600", made.stdout + made.stderr
    keyed = ["--master-key-file", str(key)]
    with running(url, tmp_path, worker_args=keyed, server_args=keyed) as (port, _, _):
        turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", weather_pcm, instructions=PROMPT))
    sid = turn.session_id
    assert "weather" in turn.user_transcript and turn.response_status == "completed"

    # What was said, prompted and answered, and a stretch of each side's audio.
    reply_audio = b"".join(base64.b64decode(e["delta"]) for e in turn.events if e["type"] == "response.output_audio.delta")
    secrets = _words(turn.user_transcript) | _words(turn.reply_transcript) | _words(PROMPT)
    audio = [weather_pcm[len(weather_pcm) // 2 :][:64], reply_audio[len(reply_audio) // 2 :][:64]]
    assert b"weather" in secrets and b"quartermaster" in secrets and all(any(a) for a in audio)
    stored, logs = _stored(url, tmp_path), _logs(tmp_path)
    assert _found(secrets, stored) == [] and [a for a in audio if a in stored] == []
    assert _found(secrets, logs) == []

    # With the key the session is whole; audit needs no key.
    sealed = EventLog(Database(url), master_keys=MasterKeys.load(key))
    said = [r.event for r in sealed.read_session(sid) if type(r.event).__name__ == "InputCommitted"]
    assert said and not any(r.withheld for r in sealed.read_session(sid))
    audit = _cli("audit", "--db", url, sid)
    assert audit.returncode == 0 and "sealed" in audit.stdout, audit.stdout + audit.stderr

    erased = _cli("erase", "--db", url, sid)
    assert erased.returncode == 0 and "data key destroyed" in erased.stdout, erased.stdout + erased.stderr
    again = _cli("erase", "--db", url, sid)
    assert again.returncode == 0 and "already erased" in again.stdout

    # Afterwards: the structure replays and audits, the content opens for no one.
    audit = _cli("audit", "--db", url, sid)
    assert audit.returncode == 0 and "content erased at" in audit.stdout, audit.stdout + audit.stderr
    replayed = _cli("replay", "--db", url, *keyed, sid, "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert _found(secrets, replayed.stdout.encode()) == []
    assert any(row["withheld"] for row in json.loads(replayed.stdout)["timeline"])
    shown = _cli("replay", "--db", url, *keyed, sid)
    assert shown.returncode == 0 and "(content withheld)" in shown.stdout and _found(secrets, shown.stdout.encode()) == []
    log = EventLog(Database(url), master_keys=MasterKeys.load(key))
    recs = log.read_session(sid)
    assert any(r.withheld for r in recs) and type(recs[-1].event).__name__ == "SessionErased"
    view = Inspector(log).overview(sid)
    assert view["content"]["erased"]["by"] == "operator" and view["content"]["withheld_events"] > 0
    assert view["user"]["audio_ms"] > 2000 and view["responses"]  # the structure: audio clock, the answer
    assert _found(secrets, json.dumps(view).encode()) == []
    page = _cli("inspect", "--db", url, *keyed, sid, "--out", str(tmp_path / "s.html"))
    assert page.returncode == 0, page.stderr
    assert _found(secrets, (tmp_path / "s.html").read_bytes()) == []
    assert _found(secrets, _stored(url, tmp_path)) == []


def _delete(port: int, session_id: str, key: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sessions/{session_id}", method="DELETE", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_owner_erases_over_http_others_cannot_tell_the_session_exists(tmp_path: Path):
    """``DELETE /v1/sessions/{id}``: another principal gets the answer of a missing session; the
    owner is told to end a live session first, then erases it (logged with their name); a
    second erasure changes nothing."""
    keys = {"alice": "alice-0123456789abcdef", "bob": "bob-0123456789abcdef"}
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"name": n, "key": k, "role": "client"} for n, k in keys.items()]))
    master = tmp_path / "master.key"
    assert _cli("master-key", "new", str(master)).returncode == 0
    url = f"sqlite:///{tmp_path / 'log.db'}"
    args = ["--api-keys", str(keys_file), "--master-key-file", str(master)]
    with running(url, tmp_path, workers=0, server_args=args) as (port, _, _):
        alice = WsClient(port, headers={"Authorization": f"Bearer {keys['alice']}"})
        alice.say("my secret plan for the aubergines")
        sid = alice.session_id
        theirs, missing = _delete(port, sid, keys["bob"]), _delete(port, "sess_0123456789abcdef", keys["bob"])
        assert theirs[0] == missing[0] == 404 and json.dumps(theirs[1]).replace(sid, "ID") == json.dumps(missing[1]).replace("sess_0123456789abcdef", "ID")
        live = _delete(port, sid, keys["alice"])
        assert live[0] == 409 and live[1]["error"]["code"] == "session_live", live
        alice.close()
        status, body = _delete(port, sid, keys["alice"])
        assert status == 200 and body["erased"] and not body["already"] and body["sealed_events"] > 0, body
        assert _delete(port, sid, keys["alice"]) == (200, {**body, "already": True})
    recs = EventLog(Database(url), master_keys=MasterKeys.load(master)).read_session(sid)
    erased = recs[-1].event
    assert type(erased).__name__ == "SessionErased" and erased.by == "alice" and recs[-1].seq == body["seq"]
    assert b"aubergines" not in _stored(url, tmp_path) and b"aubergines" not in _logs(tmp_path)


def test_a_worker_without_the_master_key_fails_the_response_instead_of_answering_silence(tmp_path: Path, weather_pcm: bytes):
    """A worker that cannot open a sealed session's content must not answer what it cannot
    read (empty text, silent audio): the response fails with ``content_withheld`` and says
    what to do."""
    master = tmp_path / "master.key"
    assert _cli("master-key", "new", str(master)).returncode == 0
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with running(url, tmp_path, server_args=["--master-key-file", str(master)]) as (port, _, _):
        turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", weather_pcm))
    done = next(e for e in turn.events if e["type"] == "response.done")["response"]
    assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "content_withheld", done
    assert "--master-key-file" in done["status_details"]["error"]["message"]


def test_retention_erases_ended_sessions_past_their_age_while_the_server_serves(tmp_path: Path):
    """``serve --retain-days`` (2 s here) with a key whose ``retain_days`` is 30: bob's ended
    session is erased by the server's sweep, with its ``session.erased``; alice's ended session
    and alice's live session are not, and the live one goes on being served meanwhile."""
    keys = {"alice": "alice-0123456789abcdef", "bob": "bob-0123456789abcdef"}
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([
        {"name": "alice", "key": keys["alice"], "role": "client", "retain_days": 30},
        {"name": "bob", "key": keys["bob"], "role": "client"},
    ]))
    master = tmp_path / "master.key"
    assert _cli("master-key", "new", str(master)).returncode == 0
    url = f"sqlite:///{tmp_path / 'log.db'}"
    two_seconds = str(2 / 86_400)
    args = ["--api-keys", str(keys_file), "--master-key-file", str(master), "--retain-days", two_seconds, "--retention-interval-ms", "200"]
    with running(url, tmp_path, workers=0, server_args=args) as (port, _, _):
        bob = WsClient(port, headers={"Authorization": f"Bearer {keys['bob']}"})
        bob.say("bob's shopping list: parsnips")
        bob.close()
        kept = WsClient(port, headers={"Authorization": f"Bearer {keys['alice']}"})
        kept.say("alice keeps this: radishes")
        kept.close()
        live = WsClient(port, headers={"Authorization": f"Bearer {keys['alice']}"})
        log = EventLog(Database(url), master_keys=MasterKeys.load(master))
        deadline = time.monotonic() + 30
        while not any(type(r.event).__name__ == "SessionErased" for r in log.read_session(bob.session_id)):
            assert time.monotonic() < deadline, "bob's session was not erased within 30 s"
            time.sleep(0.2)
        live.say("still here: turnips")  # served after the sweep erased bob's session
        live.close()
    erased = log.read_session(bob.session_id)[-1].event
    assert erased.by == "retention" and erased.reason == f"retain_days={float(two_seconds):g}"
    for sid in (kept.session_id, live.session_id):
        recs = log.read_session(sid)
        assert not any(r.withheld for r in recs) and type(recs[-1].event).__name__ != "SessionErased"
    assert b"parsnips" not in _stored(url, tmp_path) and b"retention: erased session " + bob.session_id.encode() in _logs(tmp_path)


def test_an_erasure_from_another_process_takes_effect_in_a_running_server(tmp_path: Path):
    """``duplex-es erase`` while ``serve`` runs (the server had the session's key in hand): the
    server's ``GET /v1/sessions/{id}`` shows the structure without the content at once."""
    master = tmp_path / "master.key"
    assert _cli("master-key", "new", str(master)).returncode == 0
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with running(url, tmp_path, workers=0, server_args=["--master-key-file", str(master)]) as (port, _, _):
        c = WsClient(port)
        c.say("the password is rutabaga")
        c.close()
        before = urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/sessions/{c.session_id}", timeout=10).read()
        assert b"rutabaga" in before  # the server reads it with the key
        done = _cli("erase", "--db", url, c.session_id)
        assert done.returncode == 0, done.stdout + done.stderr
        after = urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/sessions/{c.session_id}", timeout=10).read()
    assert b"rutabaga" not in after and json.loads(after)["seq"] > 0


@pytest.mark.slow
def test_an_archived_spoken_turn_replays_audits_and_inspects_from_its_file_then_erases(db_url: str, tmp_path: Path, weather_pcm: bytes):
    """``duplex-es archive`` of a sealed spoken turn (docs/privacy.md, "Archives"): the
    database gives back the session's size; the file holds no readable word; ``replay``,
    ``audit`` and ``inspect`` read it from the file and show what they showed from the log;
    erasing the archived session afterwards withholds its content in the file too; a moved file
    is found with ``--archive-dir``."""
    url = db_url if not db_url.startswith("sqlite") else f"sqlite:///{tmp_path / 'log.db'}"
    key = tmp_path / "master.key"
    assert _cli("master-key", "new", str(key)).returncode == 0
    keyed = ["--master-key-file", str(key)]
    with running(url, tmp_path, worker_args=keyed, server_args=keyed) as (port, _, _):
        turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", weather_pcm, instructions=PROMPT))
    sid = turn.session_id
    secrets = _words(turn.user_transcript) | _words(turn.reply_transcript) | _words(PROMPT)
    before = _cli("replay", "--db", url, *keyed, sid, "--json")
    assert before.returncode == 0, before.stderr
    log = EventLog(Database(url), master_keys=MasterKeys.load(key))
    overview = Inspector(log).overview(sid)

    archive = tmp_path / "archive"
    archive.mkdir()
    done = _cli("archive", "--db", url, sid, "--to", str(archive), "--compact")
    assert done.returncode == 0 and f"archived session {sid}" in done.stdout, done.stdout + done.stderr
    stored = int(re.search(r"([\d,]+) bytes in the database", done.stdout).group(1).replace(",", ""))
    was, now = (int(n.replace(",", "")) for n in re.search(r"compacted .*: ([\d,]+) -> ([\d,]+) bytes", done.stdout).groups())
    assert stored > 200_000 and was - now >= 0.8 * stored, done.stdout
    path = archive / f"{sid}.dxa"
    import zstandard

    assert _found(secrets, zstandard.ZstdDecompressor().stream_reader(path.open("rb")).read()) == []
    assert log.read_raw(sid) == []

    # Read from the file, found by the database's record: the same replay and view.
    after = _cli("replay", "--db", url, *keyed, sid, "--json")
    assert after.returncode == 0 and json.loads(after.stdout) == json.loads(before.stdout), after.stderr
    assert "read from archive" in _cli("replay", "--db", url, *keyed, sid).stdout
    audit = _cli("audit", "--db", url)
    assert audit.returncode == 0 and f"{sid}: archived, read from {path}" in audit.stdout, audit.stdout + audit.stderr
    page = _cli("inspect", "--db", url, *keyed, sid, "--out", str(tmp_path / "s.html"))
    assert page.returncode == 0 and b"weather" in (tmp_path / "s.html").read_bytes(), page.stderr
    from duplex_es.archive import open_archive

    with open_archive(str(path), hot=log, master_keys=MasterKeys.load(key)) as opened:
        assert Inspector(opened.log).overview(sid) == overview
    # Without the database that holds its key: the structure, no content.
    alone = _cli("replay", "--db", f"sqlite:///{tmp_path / 'absent.db'}", "--archive", str(path), "--json")
    assert alone.returncode == 0 and _found(secrets, alone.stdout.encode()) == [], alone.stderr
    assert any(row["withheld"] for row in json.loads(alone.stdout)["timeline"])

    # Erased while archived: its key is in the database, so the file opens for no one.
    erased = _cli("erase", "--db", url, sid)
    assert erased.returncode == 0 and "data key destroyed" in erased.stdout, erased.stdout + erased.stderr
    replayed = _cli("replay", "--db", url, *keyed, sid, "--json")
    assert replayed.returncode == 0 and _found(secrets, replayed.stdout.encode()) == [], replayed.stderr
    assert json.loads(replayed.stdout)["timeline"][-1]["type"] == "session.erased"
    cold = tmp_path / "cold"
    cold.mkdir()
    path.rename(cold / path.name)
    missing = _cli("audit", "--db", url)
    assert missing.returncode == 1 and "no such file" in missing.stdout, missing.stdout + missing.stderr
    found = _cli("audit", "--db", url, "--archive-dir", str(cold))
    assert found.returncode == 0 and "content erased at" in found.stdout, found.stdout + found.stderr


def test_a_running_server_answers_for_an_archived_session_and_its_owner_erases_it(tmp_path: Path):
    """``GET /v1/sessions/{id}`` of an archived session says so (to its owner only); a resume
    of it is refused; the owner's ``DELETE`` erases it (docs/privacy.md, "Archives")."""
    keys = {"alice": "alice-0123456789abcdef", "bob": "bob-0123456789abcdef"}
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"name": n, "key": k, "role": "client"} for n, k in keys.items()]))
    master = tmp_path / "master.key"
    assert _cli("master-key", "new", str(master)).returncode == 0
    url = f"sqlite:///{tmp_path / 'log.db'}"
    (tmp_path / "archive").mkdir()
    with running(url, tmp_path, workers=0, server_args=["--api-keys", str(keys_file), "--master-key-file", str(master)]) as (port, _, _):
        alice = WsClient(port, headers={"Authorization": f"Bearer {keys['alice']}"})
        alice.say("the aubergines go in the cellar")
        sid = alice.session_id
        alice.close()
        done = _cli("archive", "--db", url, sid, "--to", str(tmp_path / "archive"))
        assert done.returncode == 0, done.stdout + done.stderr

        def get(who: str, path: str = f"v1/sessions/{sid}") -> tuple[int, dict]:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/{path}", headers={"Authorization": f"Bearer {keys[who]}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        status, body = get("alice")
        assert status == 200 and body["archived"]["events"] == body["seq"] > 3 and not body["live"], body
        assert get("bob")[0] == 404 and _delete(port, sid, keys["bob"])[0] == 404
        # The server's inspector lists it and shows it from its file, to its owner only.
        status, overview = get("alice", f"inspect/api/sessions/{sid}/overview")
        assert status == 200 and overview["archived"]["location"] == str(tmp_path / "archive" / f"{sid}.dxa"), overview
        assert overview["head"] == body["seq"] and "aubergines" in json.dumps(get("alice", f"inspect/api/sessions/{sid}/events")[1])
        assert get("alice", f"inspect/api/sessions/{sid}/audit")[1]["ok"]
        assert [s["status"] for s in get("alice", "inspect/api/sessions")[1]["sessions"] if s["id"] == sid] == ["archived"]
        assert get("bob", f"inspect/api/sessions/{sid}/overview")[0] == 404
        assert not [s for s in get("bob", "inspect/api/sessions")[1]["sessions"] if s["id"] == sid]
        resume = WsClient(
            port, headers={"Authorization": f"Bearer {keys['alice']}"}, wait=False,
            first={"type": "session.resume", "session_id": sid, "resume_token": alice.token, "last_server_event_seq": alice.last_seq()},
        )
        assert resume.recv("error")["error"]["code"] == "session_closed"
        resume.close()
        status, body = _delete(port, sid, keys["alice"])
        assert status == 200 and body["erased"] and body["sealed_events"] > 0, body
    recs = EventLog(Database(url)).read_raw(sid)
    assert [r.type for r in recs] == ["session.erased"]


@pytest.mark.slow
def test_two_servers_sweeping_one_postgresql_erase_each_session_once(pg_schema_url: str, tmp_path: Path):
    """Two ``serve`` processes on one PostgreSQL database, both with ``--retain-days`` (2 s)
    and a 100 ms sweep: every ended session — opened on either server, one of them archived —
    gets exactly one ``session.erased``, and both servers keep serving while they race."""
    from duplex_es_tools.processes import free_port, start_server, wait_healthy

    from duplex_es.audit import audit_all
    from duplex_es.store import upgrade

    master = tmp_path / "master.key"
    assert _cli("master-key", "new", str(master)).returncode == 0
    db = Database(pg_schema_url)
    upgrade(db)
    ports = [free_port(), free_port()]
    args = ["--master-key-file", str(master), "--retain-days", str(2 / 86_400), "--retention-interval-ms", "100"]
    servers = [start_server(pg_schema_url, p, tmp_path / f"serve{i}.log", ["--server-id", f"srv{i}", *args]) for i, p in enumerate(ports)]
    try:
        for port, proc in zip(ports, servers):
            wait_healthy(port, proc)
        ended = []
        for i in range(8):
            c = WsClient(ports[i % 2])
            c.say(f"note {i}: the gooseberries are ripe")
            c.close()
            ended.append(c.session_id)
        (tmp_path / "archive").mkdir()
        archived = _cli("archive", "--db", pg_schema_url, ended[0], "--to", str(tmp_path / "archive"))
        assert archived.returncode == 0, archived.stdout + archived.stderr
        log = EventLog(db)
        deadline = time.monotonic() + 60
        live = [WsClient(port) for port in ports]
        while True:
            erased = {sid: [r for r in log.read_raw(sid) if r.type == "session.erased"] for sid in ended}
            if all(erased.values()):
                break
            assert time.monotonic() < deadline, f"not erased within 60 s: {[s for s, e in erased.items() if not e]}"
            for c in live:  # served meanwhile, on both servers
                c.say("still here")
            time.sleep(0.2)
        time.sleep(1)  # more sweeps on both servers: none may erase again
        for c in live:
            c.say("still here after the sweeps")
            c.close()
    finally:
        for p in servers:
            p.stop()
    counts = {sid: sum(r.type == "session.erased" for r in log.read_raw(sid)) for sid in ended}
    assert set(counts.values()) == {1}, counts
    swept = b"".join((tmp_path / f"serve{i}.log").read_bytes() for i in range(2))
    assert sum(swept.count(b"retention: erased session " + sid.encode()) for sid in ended) == len(ended)
    assert all(a.ok for a in audit_all(log, archive_dirs=[str(tmp_path / "archive")]))
    assert b"gooseberries" not in _stored(pg_schema_url, tmp_path)
    db.dispose()
