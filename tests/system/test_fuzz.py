"""Bounded fuzzing of both WebSocket endpoints (Realtime in the GA and beta dialects, world)
over real connections to one real server: no frame or connection URL ends in a traceback, a
dropped connection or more than one refusal (docs/security.md, "Failure paths and bounds").

Each generated frame is followed by a probe the server always refuses the same way (its
``event_id`` names it); the frames between the fuzz frame and the probe's refusal are what the
fuzz frame caused. Frames that end a session on purpose (``session.close`` and its aliases) are
left out: the connection is meant to close after them.
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from duplex_es.protocol import CLIENT_EVENT_TYPES

from conftest import backend_url
from servers import running

#: Realtime event types that end the session on purpose.
CLOSING = {"session.close", "close", "close_session"}
REALTIME_TYPES = sorted(CLIENT_EVENT_TYPES - CLOSING)
WORLD_TYPES = ["session.interaction", "session.reset", "session.resume", "session.start"]

#: The fields each parser reads (protocol/inbound.py, protocol/world.py), fuzzed with plausible
#: and implausible values alike.
FIELDS = [
    "session", "audio", "is_speech", "text", "final", "create_response", "reason", "response", "response_id", "item",
    "previous_item_id", "item_id", "content_index", "audio_end_ms", "played_ms", "committed_ms", "truncate", "audio_ms",
    "event", "payload", "session_id", "resume_token", "last_server_event_seq", "expected_epoch", "prompt", "controls",
    "seed", "width", "fps", "pacing", "max_pending", "binary",
]

junk_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN/Infinity: not JSON
    st.text(max_size=40),
    st.sampled_from(["", "<big>", "\u0000", "\ud800", "%%%%", "item_1", "resp_1", "auto", "none", "server_vad"]),
).map(lambda v: "x" * 4096 if v == "<big>" else v)
audio = st.one_of(
    st.binary(max_size=480).map(lambda b: base64.b64encode(b).decode()),  # odd lengths too
    st.sampled_from(["!!!notbase64", "AAA", "A" * 4096]),
)
session_obj = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["realtime", "transcription", "bogus"]),
        "instructions": st.text(max_size=100),
        "output_modalities": st.one_of(st.lists(st.sampled_from(["audio", "text", "video"]), max_size=3), junk_scalar),
        "audio": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "input": st.fixed_dictionaries(
                        {},
                        optional={
                            "format": st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["audio/pcm", "audio/pcmu", "x"]), "rate": junk_scalar}), junk_scalar),
                            "turn_detection": st.one_of(st.none(), st.fixed_dictionaries({"type": st.sampled_from(["server_vad", "semantic_vad", "x"])}), junk_scalar),
                        },
                    ),
                    "output": st.fixed_dictionaries({}, optional={"voice": junk_scalar, "speed": junk_scalar}),
                },
            ),
            junk_scalar,
        ),
        "tools": st.one_of(st.lists(st.fixed_dictionaries({"type": st.just("function"), "name": junk_scalar}), max_size=3), junk_scalar),
        "temperature": junk_scalar,
        "model": junk_scalar,
    },
)
item_obj = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["message", "function_call_output", "function_call", "bogus"])},
        optional={
            "role": st.sampled_from(["user", "assistant", "system", "x"]),
            "id": junk_scalar,
            "content": st.one_of(
                st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "input_audio", "text", "x"])}, optional={"text": junk_scalar, "audio": audio}), max_size=3),
                junk_scalar,
            ),
            "call_id": junk_scalar,
            "output": junk_scalar,
        },
    ),
    junk_scalar,
)
controls = st.one_of(
    st.lists(st.fixed_dictionaries({"track": junk_scalar, "schema": junk_scalar}, optional={"data": st.one_of(st.dictionaries(st.text(max_size=5), junk_scalar, max_size=3), junk_scalar)}), max_size=3),
    junk_scalar,
)
SPECIAL = {
    "session": st.one_of(session_obj, junk_scalar),
    "response": st.one_of(st.fixed_dictionaries({}, optional={"output_modalities": junk_scalar, "instructions": junk_scalar, "conversation": junk_scalar, "input": junk_scalar, "metadata": junk_scalar}), junk_scalar),
    "item": item_obj,
    "audio": st.one_of(audio, junk_scalar),
    "payload": st.one_of(st.dictionaries(st.sampled_from(FIELDS), junk_scalar, max_size=3), junk_scalar),
    "event": st.one_of(st.sampled_from(REALTIME_TYPES), junk_scalar),
    "controls": controls,
}
value_for = {name: SPECIAL.get(name, junk_scalar) for name in FIELDS}


@st.composite
def event(draw: Any, types: list[str]) -> dict:
    """One client event: a known or unknown type with some of the known fields, maybe an
    unknown one, maybe without a ``type``."""
    msg: dict[str, Any] = {}
    shape = draw(st.integers(0, 9))
    if shape == 1:
        msg["type"] = draw(junk_scalar)
    elif shape:  # mostly a known type
        msg["type"] = draw(st.sampled_from(types))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        msg[name] = draw(value_for[name])
    if draw(st.integers(0, 9)) == 0:
        msg[draw(st.text(min_size=1, max_size=20))] = draw(junk_scalar)
    return msg


garbage = st.one_of(
    st.binary(max_size=64),  # binary frames
    st.text(max_size=64).filter(lambda t: not t.strip().startswith("{")),  # mostly not JSON
    st.sampled_from(["{", "[]", "null", "1e999999", "digits", "nested", '{"type": NaN}']).map(
        lambda g: {"digits": "9" * 5000, "nested": "[" * 5000 + "]" * 5000}.get(g, g)
    ),
)


def frame(types: list[str]) -> st.SearchStrategy:
    """A JSON event (with an ``event_id`` the test assigns, or a fuzzed one) or garbage."""
    fuzzed_id = st.one_of(st.none(), junk_scalar)
    events = st.tuples(event(types), st.booleans(), fuzzed_id).map(lambda t: ("event", t))
    return st.one_of(events, events, events, garbage.map(lambda g: ("raw", g)))  # mostly events


class Endpoint:
    """One connection, with a probe that fences off what each fuzz frame caused."""

    def __init__(self, url: str, probe: dict, first: dict | None = None, headers: dict | None = None, greeted: bool = True) -> None:
        self.ws = connect(url, max_size=None, additional_headers=headers or {})
        if first is not None:
            self.ws.send(json.dumps(first))
        if greeted:
            self.ws.recv(timeout=30)  # session.created / session.started
        self.probe = probe
        self.n = itertools.count()
        self.last: Any = None  # the previous frame sent
        self.known: set[str] = set()  # item and response ids the server named: fuzzing them reaches deeper

    def learn(self, value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                self.learn(v)
        elif isinstance(value, list):
            for v in value:
                self.learn(v)
        elif isinstance(value, str) and value.startswith(("item_", "resp_")) and len(value) < 64:
            self.known.add(value)

    def exchange(self, payload: Any) -> tuple[str | int | None, list[dict]]:
        """Send ``payload`` (a dict or raw text/bytes) then the probe; the events between them."""
        n = next(self.n)
        our_id = None
        if isinstance(payload, tuple):
            msg, use_ours, fuzzed_id = payload
            msg = dict(msg)
            if use_ours:  # a world interaction's event_id is an integer; every other one a string
                our_id = msg["event_id"] = n if msg.get("type") == "session.interaction" else f"fz-{n}"
            elif fuzzed_id is not None:
                msg["event_id"] = fuzzed_id
            payload = json.dumps(msg)  # NaN floats become the non-JSON token NaN
        probe_id = f"probe-{n}"
        try:
            self.ws.send(payload)
            self.ws.send(json.dumps({**self.probe, "event_id": probe_id}))
        except ConnectionClosed as closed:  # the connection is shared: name the frame that broke it
            raise AssertionError(f"the server dropped the connection ({closed}) after {self.last!r:.500}") from None
        self.last = payload
        caused: list[dict] = []
        while True:
            try:
                got = self.ws.recv(timeout=30)
            except ConnectionClosed as closed:
                raise AssertionError(f"the server dropped the connection ({closed}) after {payload!r:.500}") from None
            ev = json.loads(got) if isinstance(got, str) else {"type": "<binary>"}
            if ev.get("type") == "error" and ev["error"].get("event_id") == probe_id:
                return our_id, caused
            self.learn(ev)
            caused.append(ev)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_fuzzed_frames_get_at_most_one_coded_refusal_and_never_break_the_server(backend: str, tmp_path: Path) -> None:
    with backend_url(backend, tmp_path) as url:
        _fuzz(url, tmp_path)


def _fuzz(db_url: str, tmp_path: Path) -> None:
    with running(db_url, tmp_path, workers=1) as (port, proc, workers):
        realtime = Endpoint(
            f"ws://127.0.0.1:{port}/v1/realtime?model=m", {"type": "conversation.item.retrieve", "item_id": "item_no_such_item"}
        )
        beta = Endpoint(
            f"ws://127.0.0.1:{port}/v1/realtime?model=m",
            {"type": "conversation.item.retrieve", "item_id": "item_no_such_item"},
            headers={"OpenAI-Beta": "realtime=v1"},
        )
        world = Endpoint(f"ws://127.0.0.1:{port}/v1/world", {"type": "probe.unknown"}, first={"type": "session.start", "event_id": "start"})
        # A world connection that never starts its session: everything is answered on the connection only.
        unstarted = Endpoint(f"ws://127.0.0.1:{port}/v1/world", {"type": "probe.unknown"}, greeted=False)
        endpoints = {"realtime": realtime, "beta": beta, "world": world, "unstarted": unstarted}
        checked = dict.fromkeys(endpoints, 0)
        realtime_frames = frame(REALTIME_TYPES)

        @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(
            st.one_of(
                st.tuples(st.sampled_from(["realtime", "beta"]), realtime_frames),
                st.tuples(st.just("world"), frame(WORLD_TYPES)),
                st.tuples(st.just("unstarted"), frame(WORLD_TYPES[:-1])),
            ),
            st.lists(st.integers(0, 10**6), min_size=3, max_size=3),
        )
        def one_frame(case: tuple, picks: list[int]) -> None:
            where, (_, payload) = case
            endpoint = endpoints[where]
            if isinstance(payload, tuple):
                if payload[0].get("type") in CLOSING | {"session.close"}:
                    return
                if where == "unstarted" and payload[0].get("type") == "session.start":
                    return
                msg = dict(payload[0])
                known = sorted(endpoint.known)
                for key, pick in zip(("item_id", "previous_item_id", "response_id"), picks):
                    if key in msg and known and pick % 2:  # half the time, an id the server handed out
                        msg[key] = known[pick % len(known)]
                payload = (msg, *payload[1:])
            our_id, caused = endpoint.exchange(payload)
            errors = [e for e in caused if e.get("type") == "error"]
            assert len(errors) <= 1, (payload, caused)
            for e in errors:
                assert isinstance(e["error"].get("code"), str) and e["error"]["code"], e
                if our_id is not None:
                    assert e["error"].get("event_id") in (our_id, None), (payload, e)
            checked[where] += 1

        one_frame()

        @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(
            st.sampled_from(["/v1/realtime", "/v1/world"]),
            st.dictionaries(
                st.sampled_from(["model", "resume_session", "resume_token", "last_server_event_seq", "x"]),
                st.one_of(st.text(max_size=30), st.sampled_from(["0", "-1", "99999999999999999999", "<big>"])).map(lambda v: "y" * 3000 if v == "<big>" else v),
            ),
        )
        def one_url(path: str, query: dict) -> None:
            """A connection URL with fuzzed parameters: a session, or a coded error (and then a
            session, or a close the error explains)."""
            url = f"ws://127.0.0.1:{port}{path}?{urlencode(query)}"
            try:
                ws = connect(url, max_size=None)
            except InvalidStatus as refused:  # a request line over the server's 8,000-byte limit
                assert refused.response.status_code == 400 and len(url) > 8000, refused
                return
            with ws:
                if path == "/v1/world":
                    ws.send(json.dumps({"type": "session.start"}))
                codes = []
                while True:
                    try:
                        ev = json.loads(ws.recv(timeout=30))
                    except ConnectionClosed as closed:  # only after the error that explains it
                        assert closed.rcvd is not None and (closed.rcvd.code, closed.rcvd.reason) == (1008, "model_not_found"), closed
                        assert codes[-1:] == ["model_not_found"], codes
                        return
                    if ev["type"] != "error":
                        break
                    assert ev["error"]["code"], ev
                    codes.append(ev["error"]["code"])
                assert len(codes) <= 2 and ev["type"] in ("session.created", "session.started"), (codes, ev)
                ws.send(json.dumps({"type": "session.close"}))

        one_url()
        out = proc.output() + workers[0].output()
        assert proc.alive() and workers[0].alive()
    assert min(checked.values()) >= 10, checked
    assert "Traceback" not in out and "Exception in ASGI application" not in out, out[-3000:]
    # Logging is bounded too: the longest line is uvicorn's access line quoting a URL (at most 8,000 bytes).
    assert max(len(line) for line in out.splitlines()) < 8_500
    audit = subprocess.run([sys.executable, "-m", "duplex_es.cli.main", "audit", "--db", db_url], capture_output=True, text=True, timeout=120)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
