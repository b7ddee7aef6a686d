"""The ``acknowledge_appends`` session option (duplex extension) over a real WebSocket, on
SQLite and PostgreSQL: off by default (OpenAI sends nothing for an append); on, every logged
append is answered with ``input_audio_buffer.appended`` naming the client's ``event_id`` and the
audio clock, projected from the log like every other server event."""

from __future__ import annotations

import base64
import json

import pytest

from duplex_es.audit import audit_session
from duplex_es.domain import Code, SessionState, evolve
from duplex_es.protocol import encode_wire, project
from duplex_es.store import Database, EventLog

from conftest import backend_url
from servers import running
from wsclient import WsClient, pcm_b64

ACK = "input_audio_buffer.appended"
ON = {"duplex": {"acknowledge_appends": True}}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A server without workers (nothing here needs a response) on a fresh database."""
    folder = tmp_path_factory.mktemp(request.param)
    with backend_url(request.param, folder) as url, running(url, folder, workers=0) as (port, proc, _):
        db = Database(url)
        yield port, EventLog(db)
        db.dispose()


def chunks(pcm: bytes, ms: int, n: int) -> list[str]:
    """The first ``n`` chunks of ``ms`` ms of 24 kHz PCM16, base64."""
    step = 48 * ms
    return [base64.b64encode(pcm[i * step : (i + 1) * step]).decode() for i in range(n)]


def wire_from_log(log: EventLog, session_id: str) -> list[str]:
    """Every server frame re-derived from the log (docs/architecture.md, I13)."""
    state, out = SessionState(), []
    for r in log.read_session(session_id):
        after = evolve(state, r.seq, r.event)
        out += [encode_wire(w) for w in project(state, r.seq, r.event, after)]
        state = after
    return out


def test_appends_are_acknowledged_only_when_the_session_asks(server, weather_pcm: bytes):
    port, log = server
    c = WsClient(port)
    assert c.events[0]["session"]["duplex"]["acknowledge_appends"] is False
    for i, audio in enumerate(chunks(weather_pcm, 20, 3)):
        c.send({"type": "input_audio_buffer.append", "event_id": f"quiet-{i}", "audio": audio})
    c.send({"type": "session.heartbeat"})
    c.recv("session.heartbeat_ack")
    assert not [e for e in c.events if e["type"] == ACK]  # the default: as in OpenAI

    session = c.update(ON)
    assert session["duplex"] == {
        "transcript_on_truncate": "heard_prefix",
        "acknowledge_appends": True,
        "mode": "turn_based",
        "modes": ["turn_based"],
        "chunk_period_ms": 200,
        "overlap": "barge_in",
        "barge_in_ms": 0,
        "extension_events": False,
        "backchannels": False,
    }
    for i, audio in enumerate(chunks(weather_pcm[48 * 60 :], 20, 10)):
        c.send({"type": "input_audio_buffer.append", "event_id": f"a-{i}", "audio": audio})
    c.send({"type": "input_audio_buffer.append", "audio": pcm_b64(40)})  # no event_id
    c.send({"type": "input_audio_buffer.append", "event_id": "odd", "audio": base64.b64encode(b"\x01\x02\x03").decode()})
    assert c.error()["code"] == Code.INVALID_AUDIO_LENGTH  # a refusal is an error, not an ack
    acks = [e for e in c.events if e["type"] == ACK]
    while len(acks) < 11:
        acks.append(c.recv(ACK))
    # 60 ms were appended before the option; each 20 ms chunk then moves the clock 20 ms.
    assert [(a["client_event_id"], a["audio_start_ms"], a["audio_end_ms"]) for a in acks] == [
        *[(f"a-{i}", 60 + 20 * i, 80 + 20 * i) for i in range(10)],
        (None, 260, 300),
    ]
    assert all(a["event_id"].startswith("event_") and a["server_event_seq"] > 0 for a in acks)

    c.update({"duplex": {"acknowledge_appends": False}})
    mark = c.mark()
    c.send({"type": "input_audio_buffer.append", "event_id": "after-off", "audio": pcm_b64(20)})
    c.send({"type": "session.heartbeat"})
    c.recv("session.heartbeat_ack")
    assert not [e for e in c.since(mark) if e["type"] == ACK]
    c.close()

    # The acks are a projection of the committed log, byte for byte, like every server event.
    created = json.loads(c.frames[0])
    created.pop("resume_token")  # handed over with session.created; the log keeps its digest
    assert [encode_wire(created)] + c.frames[1:] == wire_from_log(log, c.session_id)
    report = audit_session(log, c.session_id)
    assert report.ok, report.violations


@pytest.mark.parametrize(
    "value",
    ["yes", 1, None, {"on": True}],
    ids=["string", "number", "null", "object"],
)
def test_a_non_boolean_acknowledge_appends_is_refused_and_changes_nothing(server, value):
    port, log = server
    c = WsClient(port)
    c.send({"type": "session.update", "event_id": "bad-ack", "session": {"type": "realtime", "duplex": {"acknowledge_appends": value}}})
    err = c.error()
    assert (err["code"], err["param"], err["event_id"]) == (Code.INVALID_EVENT, "session.duplex.acknowledge_appends", "bad-ack")
    c.send({"type": "input_audio_buffer.append", "event_id": "still-quiet", "audio": pcm_b64(20)})
    c.send({"type": "session.heartbeat"})
    c.recv("session.heartbeat_ack")
    assert not [e for e in c.events if e["type"] == ACK]
    assert c.state()["state"]["config"]["acknowledge_appends"] is False
    c.close()


def test_with_server_vad_the_ack_precedes_the_verdicts_its_append_caused(server, weather_pcm: bytes):
    """An append's events are projected in log order: its ack first, then any
    ``speech_started`` / ``speech_stopped`` / commit it caused."""
    port, log = server
    c = WsClient(port)
    vad = {"type": "server_vad", "create_response": False, "silence_duration_ms": 300}
    c.update({**ON, "audio": {"input": {"turn_detection": vad}}})
    pcm = weather_pcm + b"\x00\x00" * 24 * 600  # trailing silence so the speech stops
    n = len(pcm) // (48 * 100)
    for i, audio in enumerate(chunks(pcm, 100, n)):
        c.send({"type": "input_audio_buffer.append", "event_id": f"v-{i}", "audio": audio})
    c.recv("input_audio_buffer.speech_stopped", timeout=30)
    c.recv(ACK, client_event_id=f"v-{n - 1}")
    started = [i for i, e in enumerate(c.events) if e["type"] == "input_audio_buffer.speech_started"]
    assert started
    for i in started:
        ack = c.events[i - 1]
        assert ack["type"] == ACK and c.events[i]["audio_start_ms"] < ack["audio_end_ms"]
    acks = [e["client_event_id"] for e in c.events if e["type"] == ACK]
    assert acks == [f"v-{i}" for i in range(n)]
    c.close()


def test_a_beta_client_turns_acks_on_with_the_same_duplex_object(server):
    port, log = server
    c = WsClient(port, beta=True)
    c.send({"type": "session.update", "session": {"modalities": ["text"], "duplex": {"acknowledge_appends": True}}})
    assert c.recv("session.updated")["session"]["duplex"]["acknowledge_appends"] is True
    c.send({"type": "input_audio_buffer.append", "event_id": "b-1", "audio": pcm_b64(20)})
    ack = c.recv(ACK)
    assert (ack["client_event_id"], ack["audio_start_ms"], ack["audio_end_ms"]) == ("b-1", 0, 20)
    c.close()
