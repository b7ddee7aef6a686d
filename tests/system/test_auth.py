"""Principals, ownership and resume hardening (issue 12, items 1 and 3), on a real server:
``serve --api-keys`` principals own the sessions they open; other principals get exactly the
answer a missing session gets; failed resumes are throttled and write nothing into the session
they name; a token that travelled in a URL cannot take the session over later.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from websockets.sync.client import connect

from duplex_es.domain import Code
from duplex_es.store import Database, EventLog

from servers import running
from wsclient import WsClient

KEYS = {"alice": "alice-0123456789abcdef", "bob": "bob-0123456789abcdef", "ops": "ops-0123456789abcdef"}
ROLES = {"alice": "client", "bob": "client", "ops": "operator"}
MADE_UP = "sess_0123456789abcdef"


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def get(port: int, path: str, who: str | None) -> tuple[int, bytes]:
    """``GET path`` as ``who`` (``None``: no key): status and body bytes."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=bearer(who) if who else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_for(log: EventLog, session_id: str, event_type: str, count: int = 1, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(r.event.TYPE == event_type for r in log.read_session(session_id)) >= count:
            return
        time.sleep(0.02)
    raise TimeoutError(f"no {count}x {event_type} in {session_id}")


def resume(session_id: str, token: str | None, **extra: Any) -> dict[str, Any]:
    return {"type": "session.resume", "session_id": session_id, "resume_token": token, **extra}


def refusal(port: int, who: str | None, msg: dict[str, Any]) -> dict[str, Any]:
    """The ``error`` a new connection as ``who`` gets for ``msg`` (a ``session.resume``)."""
    c = WsClient(port, first=msg, wait=False, headers=bearer(who) if who else None)
    err = c.error()
    c.ws.close()
    return err


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("keyed")
    keys = folder / "keys.json"
    keys.write_text(json.dumps([{"name": n, "key": k, "role": ROLES[n]} for n, k in KEYS.items()]))
    url = f"sqlite:///{folder / 'keyed.db'}"
    args = ["--api-keys", str(keys), "--disconnect-grace-ms", "30000", "--reaper-interval-ms", "100"]
    with running(url, folder, workers=0, server_args=args) as (port, _, _):
        db = Database(url)
        yield port, EventLog(db), folder / "keyed.db"
        db.dispose()


def test_a_session_read_by_another_principal_looks_exactly_like_a_missing_one(keyed):
    port, log, _ = keyed
    alice = WsClient(port, headers=bearer("alice"))
    alice.say("my secret plan")
    path = f"/v1/sessions/{alice.session_id}"
    theirs = get(port, path, "bob")
    missing = get(port, f"/v1/sessions/{MADE_UP}", "bob")
    assert theirs[0] == missing[0] == 404
    assert theirs[1].replace(alice.session_id.encode(), b"ID") == missing[1].replace(MADE_UP.encode(), b"ID")
    assert json.loads(theirs[1])["error"]["code"] == Code.SESSION_NOT_FOUND and b"secret" not in theirs[1]
    # The owner and an operator read it; no key gets 401.
    for who in ("alice", "ops"):
        status, body = get(port, path, who)
        assert status == 200 and json.loads(body)["state"]["lease"]["principal"] == "alice"
    assert get(port, path, None)[0] == 401
    alice.close()


def test_a_resume_by_another_principal_looks_exactly_like_one_of_a_missing_session(keyed):
    """Even with the right token: bob (a client) and ops (an operator) cannot resume alice's
    session, and cannot tell it exists; alice can."""
    port, log, db_file = keyed
    alice = WsClient(port, headers=bearer("alice"))
    token = alice.token
    alice.drop()
    wait_for(log, alice.session_id, "session.detached")
    before = len(log.read_session(alice.session_id))
    for who in ("bob", "ops"):
        theirs = refusal(port, who, resume(alice.session_id, token, event_id="r1"))
        missing = refusal(port, who, resume(MADE_UP, token, event_id="r1"))
        assert json.dumps(theirs).replace(alice.session_id, "ID") == json.dumps(missing).replace(MADE_UP, "ID")
        assert theirs["code"] == Code.SESSION_NOT_FOUND
        # The URL form too.
        c = WsClient(port, query={"resume_session": alice.session_id, "resume_token": token}, wait=False, headers=bearer(who))
        assert c.error()["code"] == Code.SESSION_NOT_FOUND
        c.ws.close()
    assert len(log.read_session(alice.session_id)) == before
    back = WsClient(port, first=resume(alice.session_id, token), headers=bearer("alice"))
    assert back.session_id == alice.session_id
    back.close()
    first = log.read_session(alice.session_id)[0].event
    assert first.TYPE == "session.opened" and first.principal == "alice"
    # Principals' names are logged, their keys nowhere.
    raw = db_file.read_bytes() + (db_file.parent / "keyed.db-wal").read_bytes() if (db_file.parent / "keyed.db-wal").exists() else db_file.read_bytes()
    assert not any(k.encode() in raw for k in KEYS.values())


def test_a_throttled_session_still_looks_missing_to_other_principals(keyed):
    """Guessing by a holder of alice's key locks alice's session (per session), but bob is
    answered session_not_found, byte for byte as for an unknown id: the lock does not show him
    that the id exists."""
    port, log, _ = keyed
    alice = WsClient(port, headers=bearer("alice"))
    alice.drop()
    wait_for(log, alice.session_id, "session.detached")
    codes = []
    for _ in range(4):
        c = WsClient(port, headers=bearer("alice"))
        for _ in range(3):
            c.send(resume(alice.session_id, "G" * 43))
            codes.append(c.error()["code"])
        c.ws.close()
    assert codes.count(Code.RESUME_TOKEN_INVALID) == 10 and codes[-1] == Code.RATE_LIMITED
    theirs = refusal(port, "bob", resume(alice.session_id, "G" * 43, event_id="r"))
    missing = refusal(port, "bob", resume(MADE_UP, "G" * 43, event_id="r"))
    assert json.dumps(theirs).replace(alice.session_id, "ID") == json.dumps(missing).replace(MADE_UP, "ID")


def test_world_sessions_belong_to_their_principal_too(keyed):
    port, log, _ = keyed
    ws = connect(f"ws://127.0.0.1:{port}/v1/world", additional_headers=bearer("alice"))
    ws.send(json.dumps({"type": "session.start", "prompt": "hills", "seed": 1, "width": 48, "height": 32, "frames_per_chunk": 3}))
    started = json.loads(ws.recv(timeout=10))
    assert started["type"] == "session.started"
    session_id, token = started["session_id"], started["resume_token"]
    ws.close()
    wait_for(log, session_id, "session.detached")
    first = log.read_session(session_id)[0].event
    assert first.TYPE == "world.session.started" and first.principal == "alice"
    for who, want in (("bob", Code.SESSION_NOT_FOUND), ("alice", None)):
        ws = connect(f"ws://127.0.0.1:{port}/v1/world", additional_headers=bearer(who))
        ws.send(json.dumps(resume(session_id, token)))
        reply = json.loads(ws.recv(timeout=10))
        if want is None:
            assert reply["type"] == "session.resumed"
            token = reply["resume_token"]
        else:
            assert reply["error"]["code"] == want and reply["error"]["message"] == f"no session {session_id}"
        ws.close()


def test_unknown_keys_are_refused_on_both_websockets(keyed):
    port, _, _ = keyed
    for path in ("/v1/realtime", "/v1/world"):
        for headers in ({}, {"Authorization": "Bearer alice-0123456789abcdeX"}):
            with pytest.raises(Exception) as closed:
                connect(f"ws://127.0.0.1:{port}{path}", additional_headers=headers).recv(timeout=5)
            assert getattr(closed.value, "rcvd", None) is None or closed.value.rcvd.code == 1008


def test_healthz_names_the_backend_not_the_database_url(keyed):
    port, _, db_file = keyed
    status, body = get(port, "/healthz", None)
    health = json.loads(body)
    assert status == 200 and health["database"] == "sqlite"
    assert str(db_file).encode() not in body and db_file.name.encode() not in body


# ----------------------------------------------------------------------------- resume hardening

WINDOW_MS = 2000
URL_LEEWAY_MS = 1000


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory):
    """No keys (the local default), a 2 s throttle window, a 1 s URL token leeway."""
    folder = tmp_path_factory.mktemp("throttle")
    url = f"sqlite:///{folder / 'open.db'}"
    args = ["--resume-throttle-window-ms", str(WINDOW_MS), "--url-token-leeway-ms", str(URL_LEEWAY_MS), "--disconnect-grace-ms", "30000", "--reaper-interval-ms", "100"]
    with running(url, folder, workers=0, server_args=args) as (port, server, _):
        db = Database(url)
        yield port, EventLog(db), server
        db.dispose()


def test_guessing_is_throttled_writes_nothing_into_the_session_and_locks_its_owner_out_for_one_window_at_most(open_server):
    port, log, server = open_server
    victim = WsClient(port)
    victim.say("hello")
    token = victim.token
    victim.drop()
    wait_for(log, victim.session_id, "session.detached")
    rows = len(log.read_session(victim.session_id))
    guess = "G" * 43
    codes: list[str] = []
    retry_after: list[int] = []
    while len(codes) < 50:
        c = WsClient(port)
        for _ in range(4):
            c.send(resume(victim.session_id, guess))
            err = c.error()
            codes.append(err["code"])
            if err["code"] == Code.RATE_LIMITED and err["retry_after_ms"] is not None:
                retry_after.append(err["retry_after_ms"])
        c.ws.close()
    # 3 failures per connection, 10 per session a window; the rest refused unexamined.
    assert codes[:4] == [Code.RESUME_TOKEN_INVALID] * 3 + [Code.RATE_LIMITED]
    assert codes.count(Code.RESUME_TOKEN_INVALID) == 10 and codes.count(Code.RATE_LIMITED) == 42
    assert retry_after and all(0 < r <= WINDOW_MS + 1 for r in retry_after)
    assert len(log.read_session(victim.session_id)) == rows  # nothing written into the victim's log
    # While the session is throttled even its right token waits (a bounded lock) ...
    assert refusal(port, None, resume(victim.session_id, token))["code"] == Code.RATE_LIMITED
    assert len(log.read_session(victim.session_id)) == rows
    # ... for at most one window after the last counted failure.
    time.sleep(WINDOW_MS / 1000 + 0.2)
    back = WsClient(port, first=resume(victim.session_id, token))
    assert back.session_id == victim.session_id
    back.close()
    # An operator sees the failures: a counter and a log line, never the tokens.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert 'duplex_es_resume_failures_total{endpoint="speech",reason="invalid_resume_token"} 10.0' in metrics
    assert 'duplex_es_resume_failures_total{endpoint="speech",reason="rate_limited"} 43.0' in metrics
    output = server.output()
    assert "invalid_resume_token" in output and "throttled (session)" in output
    assert guess not in output and token not in output


def url_resumed(port: int, log: EventLog) -> tuple[WsClient, str]:
    """A session resumed once by URL (its first token now in "an access log"), then dropped:
    the resumed client and the token the URL carried."""
    a = WsClient(port)
    a.drop()
    wait_for(log, a.session_id, "session.detached")
    b = WsClient(port, query={"resume_session": a.session_id, "resume_token": a.token})
    assert b.session_id == a.session_id and b.token != a.token
    b.drop()
    wait_for(log, a.session_id, "session.detached", count=2)
    return b, a.token  # type: ignore[return-value]


def test_a_token_that_was_in_a_url_cannot_take_the_session_over_later(open_server):
    """Past the URL leeway (1 s here; none by default) the token a URL resume used is void,
    while detached too — where before, the token a resume rotated away was good until the next
    resume; the client that resumed holds the new token and is not locked out."""
    port, log, _ = open_server
    b, leaked = url_resumed(port, log)
    time.sleep(URL_LEEWAY_MS / 1000 + 0.2)
    for attempt in ({"first": resume(b.session_id, leaked)}, {"query": {"resume_session": b.session_id, "resume_token": leaked}}):
        thief = WsClient(port, wait=False, **attempt)  # type: ignore[arg-type]
        assert thief.error()["code"] == Code.RESUME_CONFLICT
        thief.ws.close()
    c = WsClient(port, first=resume(b.session_id, b.token))
    assert c.session_id == b.session_id
    c.close()
    resumed = [r.event for r in log.read_session(b.session_id) if r.event.TYPE == "session.resumed"]
    assert [e.token_in_url for e in resumed] == [True, False]


def test_a_url_resume_whose_reply_was_lost_can_be_retried_at_once(open_server):
    """The leeway a URL token keeps: a client that never read its session.resumed (the server
    or the connection died) retries with the token it has, by URL, as the SDK does."""
    port, log, _ = open_server
    b, leaked = url_resumed(port, log)
    retry = WsClient(port, query={"resume_session": b.session_id, "resume_token": leaked})
    assert retry.session_id == b.session_id
    retry.close()
