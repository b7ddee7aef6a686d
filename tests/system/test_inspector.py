"""The inspector's HTTP API (docs/inspector.md) against real logs: a spoken turn the user barges
in on and a world session, made by real ``serve`` + ``worker`` processes on SQLite and
PostgreSQL, read through ``serve``'s ``/inspect`` with its API keys (and ``duplex-es inspect``
and its single-file export on a copy of the log)."""

from __future__ import annotations

import base64
import io
import json
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
import wave
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest

from duplex_es.events import AudioAppended, TickOutput, UnitIssued, UnitOutput, WorldChunk, to_plain
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog

from conftest import backend_url
from inspect_support import CUT_MS, full_duplex_overlap, serving_inspector, spoken_barge_in, world_session
from servers import running
from tampering import attack

pytestmark = pytest.mark.slow

KEYS = {"alice": "alice-key-0123456789abcdef", "bob": "bob-key-0123456789abcdef", "ops": "ops-key-0123456789abcdef"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def logs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """``(port, log, barge_in, world)``: a server with alice's, bob's (clients) and ops'
    (operator) keys and a worker; alice made both sessions."""
    folder = tmp_path_factory.mktemp(f"inspector-{request.param}")
    keys = folder / "keys.json"
    keys.write_text(json.dumps([
        {"name": "alice", "key": KEYS["alice"], "role": "client"},
        {"name": "bob", "key": KEYS["bob"], "role": "client"},
        {"name": "ops", "key": KEYS["ops"], "role": "operator"},
    ]))
    alice = {"Authorization": f"Bearer {KEYS['alice']}"}
    with backend_url(request.param, folder) as url:
        with running(url, folder, worker_args=["--chunk-ms", "250"], server_args=["--api-keys", str(keys)]) as (port, _, _):
            barge = spoken_barge_in(port, headers=alice)
            world = world_session(port, headers=alice)
            db = Database(url)
            yield port, EventLog(db), barge, world, url, folder
            db.dispose()


def get(port: int, path: str, who: Optional[str] = "alice", raw: bool = False) -> Any:
    """GET ``/inspect/api/<path>`` as ``who``; JSON (or bytes with ``raw``)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/inspect/api/{path}")
    if who is not None:
        req.add_header("Authorization", f"Bearer {KEYS[who]}")
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return body if raw else json.loads(body)


def refusal(port: int, path: str, who: Optional[str] = "alice") -> tuple[int, dict]:
    """The HTTP status and error of a refused request."""
    with pytest.raises(urllib.error.HTTPError) as err:
        get(port, path, who)
    return err.value.code, json.loads(err.value.read())["error"]


def wav_samples(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"), w.getframerate()


def logged_user_audio(log: EventLog, sid: str) -> np.ndarray:
    return np.frombuffer(b"".join(base64.b64decode(r.event.audio) for r in log.read_session(sid) if isinstance(r.event, AudioAppended)), dtype="<i2")


def test_the_list_shows_each_session_with_its_kind_status_and_counts_and_filters(logs):
    port, log, barge, world, *_ = logs
    rows = {r["id"]: r for r in get(port, "sessions")["sessions"]}
    speech, w = rows[barge["session_id"]], rows[world["session_id"]]
    assert (speech["kind"], speech["status"], speech["responses"], speech["events"]) == ("speech", "closed", 1, log.head(barge["session_id"]))
    assert (w["kind"], w["status"]) == ("world", "closed") and w["chunks"] >= 3
    assert speech["owner"] == "alice" and speech["duration_ms"] >= 0
    assert [r["id"] for r in get(port, "sessions?kind=world")["sessions"]] == [world["session_id"]]
    assert [r["id"] for r in get(port, f"sessions?q={barge['session_id'][-6:]}")["sessions"]] == [barge["session_id"]]
    assert get(port, "sessions?errors=1")["sessions"] == []
    # The audit runs on demand and is then listed for this head.
    assert get(port, f"sessions/{barge['session_id']}/audit")["ok"] is True
    assert get(port, f"sessions?q={barge['session_id']}")["sessions"][0]["audit"]["ok"] is True


def test_the_overview_of_a_barge_in_has_both_speakers_the_cut_and_the_ticks(logs):
    port, log, barge, *_ = logs
    sid = barge["session_id"]
    ov = get(port, f"sessions/{sid}/overview")
    assert ov["clock"] == "audio" and ov["head"] == log.head(sid)
    user = ov["user"]
    assert user["audio_ms"] == logged_user_audio(log, sid).size * 1000 // 24000
    first, second = user["vad"][:2]
    assert first["end_ms"] > first["start_ms"] and second["seq"] > first["stop_seq"]  # the user spoke again
    assert [c["item_id"] for c in user["commits"]] == [first["item_id"]]
    (resp,) = ov["responses"]
    assert (resp["id"], resp["status"], resp["reason"]) == (barge["response_id"], "cancelled", "turn_detected")
    assert resp["seq"] > user["commits"][0]["seq"] and resp["done_seq"] > second["seq"]  # cut off by the second turn
    assert resp["played_ms"] == CUT_MS and resp["audio_ms"] > 0
    (item,) = resp["items"]
    assert (item["id"], item["truncated_ms"]) == (barge["item_id"], CUT_MS)
    assert item["marks"] and item["text"].startswith(item["transcript"]) and len(item["transcript"]) < len(item["text"])
    answered = [t for t in ov["ticks"] if t["response_id"] == resp["id"]]
    assert answered[0]["applied"] == [user["commits"][0]["seq"]]  # the first tick applied the commit
    answers = [a for t in answered for a in t["answers"]]
    assert all(a["verdict"] == "accepted" for a in answers if a["seq"] < resp["done_seq"])
    late = [a for a in answers if a["seq"] > resp["done_seq"]]  # a chunk the engine finished after the cut
    assert all(a["verdict"].startswith("discarded") for a in late)
    assert {a["seq"] for a in late} <= {e["seq"] for e in ov["errors"]}
    types = {m[2] for m in ov["markers"]}
    assert {"input_audio_buffer.speech_started", "response.done", "conversation.item.truncated", "playback.acked"} <= types
    assert [e["type"] for e in ov["lifecycle"]][-1] == "session.closed"


def test_audio_comes_back_as_logged_with_a_header_whose_duration_matches(logs):
    port, log, barge, *_ = logs
    sid = barge["session_id"]
    logged = logged_user_audio(log, sid)
    pcm, rate = wav_samples(get(port, f"sessions/{sid}/audio.wav?lane=user", raw=True))
    assert rate == 24000 and np.array_equal(pcm, logged)
    part, _ = wav_samples(get(port, f"sessions/{sid}/audio.wav?lane=user&from_ms=1000&to_ms=2500", raw=True))
    assert np.array_equal(part, logged[24000:60000])
    # The reply as the session kept it: a chunk that came after the cut is discarded, not played.
    accepted = {row.seq for row in replay(log, sid).timeline if row.verdict == "accepted"}
    out = b"".join(
        base64.b64decode(r.event.audio) for r in log.read_session(sid)
        if isinstance(r.event, TickOutput) and r.event.response_id == barge["response_id"] and r.seq in accepted
    )
    said, _ = wav_samples(get(port, f"sessions/{sid}/audio.wav?lane=response:{barge['response_id']}", raw=True))
    assert said.tobytes() == out


def test_peaks_are_the_min_and_max_of_the_logged_audio_per_bucket(logs):
    port, log, barge, *_ = logs
    sid = barge["session_id"]
    logged = logged_user_audio(log, sid)
    whole = get(port, f"sessions/{sid}/peaks?lane=user&buckets=50")
    assert whole["buckets"] == len(whole["min"]) == len(whole["max"]) == 50
    assert max(whole["max"]) == logged.max() and min(whole["min"]) == logged.min()
    # Finer than the kept 10 ms peaks: read from the log for that range (2 ms buckets here).
    fine = get(port, f"sessions/{sid}/peaks?lane=user&from_ms=2000&to_ms=2100&buckets=50")
    chunk = logged[48000:50400].reshape(50, 48)
    assert fine["max"] == chunk.max(axis=1).tolist() and fine["min"] == chunk.min(axis=1).tolist()


def test_events_and_the_state_at_any_seq_are_replays(logs):
    port, log, barge, *_ = logs
    sid = barge["session_id"]
    full = replay(log, sid)
    page = get(port, f"sessions/{sid}/events?from_seq=70&limit=40")
    assert [(r["seq"], r["type"], r["verdict"], r["summary"]) for r in page["rows"]] == [
        (t.seq, t.type, t.verdict, t.summary) for t in full.timeline[69:109]
    ]
    done = next(t.seq for t in full.timeline if t.type == "response.done")
    at = get(port, f"sessions/{sid}/state?seq={done}")
    assert at["state"] == to_plain(replay(log, sid, at=done).state)
    assert at["event"]["type"] == "response.done" and at["state"]["responses"][barge["response_id"]]["status"] == "cancelled"
    by_ms = get(port, f"sessions/{sid}/state?ms=0")
    assert by_ms["seq"] >= 1 and by_ms["state"]["session_id"] == sid


def test_bad_requests_get_a_coded_error_naming_the_parameter(logs):
    port, log, barge, *_ = logs
    sid = barge["session_id"]
    head = log.head(sid)
    assert refusal(port, f"sessions/{sid}/peaks?buckets=0") == (400, {"code": "invalid_parameter", "message": "buckets must be 1..4000, got 0", "param": "buckets"})
    assert refusal(port, f"sessions/{sid}/peaks?lane=response:nope")[1]["code"] == "lane_not_found"
    assert refusal(port, f"sessions/{sid}/events?from_seq={head + 1}") == (
        400, {"code": "seq_out_of_range", "message": f"from_seq {head + 1} is outside session {sid}, whose events are 1..{head}", "param": "from_seq"}
    )
    assert refusal(port, f"sessions/{sid}/audio.wav?from_ms=x")[1] == {"code": "invalid_parameter", "message": "from_ms must be an integer, got 'x'", "param": "from_ms"}
    assert refusal(port, f"sessions/{sid}/audio.wav?from_ms=500&to_ms=100")[1]["param"] == "to_ms"
    huge = refusal(port, f"sessions/{sid}/peaks?lane=user&from_ms=0&to_ms=99999999999999999999&buckets=10")
    assert huge[0] == 400 and huge[1]["code"] == "invalid_parameter" and huge[1]["param"] == "to_ms"
    assert refusal(port, "sessions/sess_nope/overview") == (404, {"code": "session_not_found", "message": "no session sess_nope", "param": "session_id"})


def test_the_api_keys_and_ownership_of_the_api_hold_for_the_inspector(logs):
    port, _, barge, world, *_ = logs
    sid = barge["session_id"]
    assert refusal(port, "sessions", who=None)[0] == 401
    assert refusal(port, f"sessions/{sid}/overview", who=None)[0] == 401
    # Bob's answer for alice's session is exactly the one for a session that does not exist.
    status, err = refusal(port, f"sessions/{sid}/overview", who="bob")
    assert (status, err) == (404, {"code": "session_not_found", "message": f"no session {sid}", "param": "session_id"})
    for path in (f"sessions/{sid}/audio.wav", f"sessions/{sid}/state?seq=1", f"sessions/{sid}/audit"):
        assert refusal(port, path, who="bob")[0] == 404
    assert get(port, "sessions", who="bob")["sessions"] == []
    assert {r["id"] for r in get(port, "sessions", who="ops")["sessions"]} >= {sid, world["session_id"]}
    assert get(port, f"sessions/{sid}/overview", who="ops")["session_id"] == sid
    # The page itself holds no data: served to anyone, it asks for the key.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/inspect/", timeout=10) as r:
        assert b"inspector.js" in r.read()


def test_a_world_session_shows_its_chunks_with_the_interactions_each_applied(logs):
    port, log, _, world, *_ = logs
    sid = world["session_id"]
    ov = get(port, f"sessions/{sid}/overview")
    assert ov["kind"] == "world" and ov["clock"] == "wall" and ov["world"]["config"]["frames_per_chunk"] == 3
    chunk = next(c for c in ov["world"]["chunks"] if c["chunk"] == world["applied_chunk"])
    assert [(i["event_id"], i.get("prompt")) for i in chunk["applied"]] == [(1, None), (2, "snowy hills")]
    assert chunk["applied"][0]["controls"][0]["data"] == {"keys": ["W"]}
    logged = next(r.event for r in log.read_session(sid) if r.seq == chunk["seq"])
    assert isinstance(logged, WorldChunk)
    png = get(port, f"sessions/{sid}/frame?seq={chunk['seq']}&index=2", raw=True)
    assert png == base64.b64decode(logged.frames[2]) and png.startswith(b"\x89PNG")
    assert refusal(port, f"sessions/{sid}/frame?seq=1&index=0")[1]["code"] == "frame_not_found"


def test_the_audit_names_the_failing_check_of_a_tampered_log(logs, tmp_path: Path):
    _, _, barge, _, url, _ = logs
    if not url.startswith("sqlite"):
        pytest.skip("tampering with a copy of the log: SQLite's file is copied; PostgreSQL's tampering is in test_tamper_e2e")
    copy = tmp_path / "tampered.db"
    with sqlite3.connect(url.removeprefix("sqlite:///")) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)  # with what is still in the WAL
    sid = barge["session_id"]

    def after(statement: str) -> dict[str, tuple[int, dict]]:
        """Run ``statement`` on the copy; then ``duplex-es inspect``'s answers (status, JSON)
        for the session's audit and overview."""
        db = Database(f"sqlite:///{copy}")
        attack(db, statement)
        db.dispose()
        answers = {}
        with serving_inspector(f"sqlite:///{copy}", tmp_path) as base:
            for what in ("audit", "overview"):
                try:
                    with urllib.request.urlopen(f"{base}api/sessions/{sid}/{what}", timeout=60) as r:
                        answers[what] = (r.status, json.loads(r.read()))
                except urllib.error.HTTPError as err:
                    answers[what] = (err.code, json.loads(err.read())["error"])
        return answers

    edited = after(f"UPDATE events SET data = replace(data, 'turn_detected', 'client_cancelled') WHERE session_id = '{sid}' AND type = 'response.done'")
    status, audit = edited["audit"]
    assert audit["ok"] is False and audit["failed_check"] == "chain" and audit["checks"]["chain"] == "failed"
    assert audit["checks"]["decode"] == "ok" and "edited" in audit["violations"][0]["message"]
    # A row that no longer decodes: the timeline names it; the audit still answers.
    unreadable = after(f"UPDATE events SET data = '{{}}' WHERE session_id = '{sid}' AND seq = 5")
    status, body = unreadable["overview"]
    assert status == 500 and body["code"] == "stored_event_unreadable" and f"session {sid}, seq 5" in body["message"]
    assert unreadable["audit"][1]["checks"]["decode"] == "failed"
    # ... and a deleted row: a gap in the seqs.
    status, body = after(f"DELETE FROM events WHERE session_id = '{sid}' AND seq = 5")["overview"]
    assert (status, body["code"], body["message"]) == (500, "session_log_broken", f"session {sid}: expected seq 5, got 6")


def test_the_exported_file_holds_the_view_and_the_audio_and_nothing_from_the_network(logs, tmp_path: Path):
    _, log, barge, _, url, _ = logs
    sid = barge["session_id"]
    out = tmp_path / "session.html"
    subprocess.run([sys.executable, "-m", "duplex_es.cli.main", "inspect", sid, "--db", url, "--out", str(out)], check=True, capture_output=True)
    html = out.read_text()
    assert "http://" not in html and "https://" not in html and 'src="static/' not in html
    start = html.index("window.INSPECTOR_EXPORT = ") + len("window.INSPECTOR_EXPORT = ")
    data = json.loads(html[start : html.index(";</script>", start)])
    assert data["overview"]["responses"][0]["items"][0]["truncated_ms"] == CUT_MS
    user = base64.b64decode(data["audio"]["user"]["url"].split(",", 1)[1])
    pcm, _ = wav_samples(user)
    assert np.array_equal(pcm, logged_user_audio(log, sid))
    assert len(data["events"]) == log.head(sid) and data["audit"]["ok"] is True


def test_a_full_duplex_session_shows_its_units_and_the_models_turns_with_their_audio(tmp_path: Path):
    """The model's turns open from its units (no response.create): each turn's lane holds the
    audio of its speaking units, the units show the appends they heard, and the overlap
    decision that cut the second turn is on the lifecycle lane."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with running(url, tmp_path) as (port, _, _):
        sid = full_duplex_overlap(port)
    db = Database(url)
    records = EventLog(db).read_session(sid)
    db.dispose()
    with serving_inspector(url, tmp_path) as base:
        with urllib.request.urlopen(f"{base}api/sessions/{sid}/overview", timeout=60) as r:
            ov = json.loads(r.read())
        first = ov["responses"][0]
        with urllib.request.urlopen(f"{base}api/sessions/{sid}/audio.wav?lane=response:{first['id']}", timeout=60) as r:
            said, _ = wav_samples(r.read())
    units = [t for t in ov["ticks"] if t["kind"] == "duplex"]
    issued = [r for r in records if isinstance(r.event, UnitIssued)]
    assert len(units) == len(issued) and [u["applied"] for u in units] == [list(r.event.applied_event_ids) for r in issued]
    assert first["status"] == "completed" and first["audio_ms"] > 1000
    spoken = b"".join(base64.b64decode(r.event.audio) for r in records if isinstance(r.event, UnitOutput) and r.event.audio and r.seq <= first["done_seq"])
    assert said.tobytes() == spoken
    cut = next(r for r in ov["responses"] if r["status"] == "cancelled")
    assert cut["reason"] == "turn_detected" and cut["audio_ms"] > 0
    decided = next(e for e in ov["lifecycle"] if e["type"] == "overlap.decided")
    assert "barge_in" in decided["summary"] and cut["id"] in decided["summary"]


def test_inspect_refuses_an_address_other_machines_reach_and_an_export_without_a_session(logs, capsys):
    _, _, _, _, url, _ = logs
    from duplex_es.cli.main import main

    assert main(["inspect", "--db", url, "--host", "0.0.0.0"]) == 2
    assert "--host 0.0.0.0 is reachable from other machines, and `inspect` has no authentication" in capsys.readouterr().err
    assert main(["inspect", "--db", url, "--out", "x.html"]) == 2
    assert "inspect --out FILE.html: name the session to export" in capsys.readouterr().err
