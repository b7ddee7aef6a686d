"""The recorded sessions that ``make test`` rechecks (``tests/corpus/*.jsonl``; docs/replay.md,
"Rechecking history"), remade by ``scripts/make_corpus.py``.

Runs ``serve`` and ``worker`` as OS processes on a new SQLite file, plays a few scripted sessions
against them over real WebSockets with the shared speech fixtures, and exports each session's
log as JSON Lines (``duplex-es export``'s format). Audio is G.711 mu-law at 8 kHz both ways, and
the world renders tiny frames, so the corpus stays small (well under 2 MB).

The sessions:

* ``spoken_turn``: a spoken question, turned by server VAD into a user item and a response,
  whose playback the client acknowledges;
* ``barge_in``: the user talks over the reply: server VAD cancels it (``turn_detected``), the
  client truncates the item where playback stopped, and the second turn is answered;
* ``function_call``: a typed question with a tool: the model calls it, the client answers the
  call, and the model answers in text;
* ``full_duplex``: speech streamed at real time into a full-duplex model, which answers by itself;
* ``judged_turn``: ``semantic_vad`` in a turn-based session on the full-duplex engine, which
  judges when the turn ends; the user's audio transcribed;
* ``refusals``: bad input refused with its code (a frame that is not JSON, an empty commit,
  cancels with nothing to cancel) around a typed turn, item edits and session updates;
* ``resumed``: a response cancelled while it runs, typed input dropped, the connection lost and
  the session resumed with its token;
* ``world``: a world session steered by interactions, a repeated interaction id refused, a
  reset, then closed.
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from duplex_es.audio import encode_from_pcm16, resample_pcm16
from duplex_es.export import write_jsonl
from duplex_es.store import Database, EventLog, upgrade
from duplex_es_tools.conversation import default_audio, read_wav_pcm16
from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy

__all__ = ["SCRIPTS", "make_corpus"]

#: G.711 at 8 kHz: one byte per sample, 8 bytes per ms.
_RATE = 8000
_ULAW = {"type": "audio/pcmu"}
_APPEND_MS = 100


class _Client:
    """One WebSocket connection that keeps every event it received."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(url, max_size=None)
        self.events: list[dict[str, Any]] = []

    def send(self, obj: Any) -> None:
        self.ws.send(obj if isinstance(obj, str) else json.dumps(obj))

    def recv(self, kind: str, timeout: float = 60.0, after: int = 0, **match: Any) -> dict[str, Any]:
        """The first event of type ``kind`` (from index ``after``) whose fields equal ``match``
        (``a__b`` names the field ``b`` of the object ``a``)."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events[after:]:
                if ev.get("type") == kind and all(_dig(ev, k) == v for k, v in match.items()):
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} {match or ''} within {timeout} s; last events: {[e.get('type') for e in self.events[-8:]]}")
            try:
                self.events.append(json.loads(self.ws.recv(timeout=min(left, 1.0))))
            except TimeoutError:
                pass

    def close(self, closed: str = "session.closed") -> None:
        self.send({"type": "session.close"})
        self.recv(closed)
        self.ws.close()


def _dig(ev: dict[str, Any], dotted: str) -> Any:
    cur: Any = ev
    for part in dotted.split("__"):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def _ulaw(name: str) -> bytes:
    """A 24 kHz PCM16 WAV fixture as mu-law at 8 kHz."""
    pcm = resample_pcm16(read_wav_pcm16(default_audio().parent / name), 24000, _RATE)
    return encode_from_pcm16(np.frombuffer(pcm, "<i2"), "audio/pcmu")


def _silence(ms: int) -> bytes:
    return encode_from_pcm16(np.zeros(_RATE * ms // 1000, "<i2"), "audio/pcmu")


def _stream(c: _Client, audio: bytes, *, real_time: bool = False) -> None:
    """Append ``audio`` in 100 ms appends (at real time when asked: a full-duplex model hears
    the input as it comes)."""
    step, start = _RATE * _APPEND_MS // 1000, time.monotonic()
    for n, at in enumerate(range(0, len(audio), step), 1):
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio[at : at + step]).decode()})
        if real_time:
            time.sleep(max(0.0, start + n * _APPEND_MS / 1000 - time.monotonic()))


def _speech_session(base: str, model: str = "gpt-realtime", **session: Any) -> _Client:
    c = _Client(f"{base}/v1/realtime?model={model}")
    c.recv("session.created")
    audio = {"input": {"format": _ULAW}, "output": {"format": _ULAW}}
    c.send({"type": "session.update", "event_id": "fmt", "session": {"type": "realtime", "audio": audio, **session}})
    c.recv("session.updated")
    return c


def spoken_turn(base: str) -> str:
    """Play the ``spoken_turn`` session against the server at ``base`` (``ws://host:port``); its id."""
    c = _speech_session(base)
    _stream(c, _ulaw("weather_question_24k.wav") + _silence(1000))
    done = c.recv("response.done")["response"]
    heard = sum(len(base64.b64decode(e["delta"])) for e in c.events if e["type"] == "response.output_audio.delta") // 8
    c.send({"type": "playback.ack", "event_id": "played", "response_id": done["id"], "played_ms": heard})
    c.close()  # the close is decided after the ack: commands of one connection are taken in order
    return c.events[0]["session"]["id"]


def barge_in(base: str) -> str:
    """Play the ``barge_in`` session; its id."""
    c = _speech_session(base)
    _stream(c, _ulaw("weather_question_24k.wav") + _silence(1000))
    first = c.recv("response.output_audio.delta")
    mark = len(c.events)
    _stream(c, _ulaw("correction_24k.wav") + _silence(1000))  # over the reply: server VAD cancels it
    c.recv("response.done", after=mark, response__status="cancelled")
    heard = min(200, sum(len(base64.b64decode(e["delta"])) for e in c.events if e["type"] == "response.output_audio.delta" and e["item_id"] == first["item_id"]) // 8)
    c.send({"type": "conversation.item.truncate", "event_id": "cut", "item_id": first["item_id"], "content_index": 0, "audio_end_ms": heard})
    c.recv("conversation.item.truncated")
    c.recv("response.done", after=mark, response__status="completed")
    c.close()
    return c.events[0]["session"]["id"]


_WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def function_call(base: str) -> str:
    """Play the ``function_call`` session; its id."""
    c = _speech_session(base, output_modalities=["text"], tools=[_WEATHER_TOOL], tool_choice="auto")
    c.send({"type": "conversation.item.create", "event_id": "ask", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]}})
    c.send({"type": "response.create", "event_id": "r1"})
    call = c.recv("response.function_call_arguments.done")
    c.recv("response.done")
    mark = len(c.events)
    c.send({"type": "conversation.item.create", "event_id": "answer", "item": {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny and 21 degrees"}})
    c.send({"type": "response.create", "event_id": "r2"})
    c.recv("response.done", after=mark)
    c.close()
    return c.events[0]["session"]["id"]


def full_duplex(base: str) -> str:
    """Play the ``full_duplex`` session (about 10 s at real time); its id."""
    c = _speech_session(base, model="duplex-es-duplex")
    _stream(c, _ulaw("weather_question_24k.wav") + _silence(1500), real_time=True)
    c.recv("response.done", timeout=60)
    _stream(c, _silence(600), real_time=True)
    c.close()
    return c.events[0]["session"]["id"]


def judged_turn(base: str) -> str:
    """Play the ``judged_turn`` session (about 8 s at real time); its id."""
    transcribed = {"transcription": {"model": "gpt-4o-mini-transcribe"}, "turn_detection": {"type": "semantic_vad"}}
    c = _speech_session(base, model="duplex-es-duplex", duplex={"mode": "turn_based"}, audio={"input": {"format": _ULAW, **transcribed}, "output": {"format": _ULAW}})
    _stream(c, _ulaw("weather_question_24k.wav") + _silence(2500), real_time=True)
    c.recv("response.done", timeout=60)
    c.recv("conversation.item.input_audio_transcription.completed", timeout=60)
    c.close()
    return c.events[0]["session"]["id"]


def refusals(base: str) -> str:
    """Play the ``refusals`` session; its id."""
    c = _speech_session(base, output_modalities=["text"])
    c.send("{this is not json")
    c.recv("error")
    c.send({"type": "input_audio_buffer.commit", "event_id": "empty"})
    c.recv("error", error__event_id="empty")
    c.send({"type": "response.cancel", "event_id": "nothing"})
    c.recv("error", error__event_id="nothing")
    c.send({"type": "barge_in", "event_id": "quiet"})
    c.recv("error", error__event_id="quiet")
    c.send({"type": "session.heartbeat", "event_id": "hb"})
    c.send({"type": "turn.signal", "event_id": "sig", "event": "user_started"})
    c.send({"type": "session.update", "event_id": "calm", "session": {"type": "realtime", "instructions": "Answer briefly.", "audio": {"input": {"turn_detection": None}}}})
    c.recv("session.updated", after=2)
    c.send({"type": "conversation.item.create", "event_id": "sys", "item": {"id": "item_sys", "type": "message", "role": "system", "content": [{"type": "input_text", "text": "You are terse."}]}})
    c.send({"type": "conversation.item.retrieve", "event_id": "get", "item_id": "item_sys"})
    c.recv("conversation.item.retrieved")
    c.send({"type": "conversation.item.delete", "event_id": "del", "item_id": "item_sys"})
    c.recv("conversation.item.deleted")
    c.send({"type": "input.text.append", "event_id": "typed", "text": "hello there"})
    c.send({"type": "input_audio_buffer.commit", "event_id": "commit"})
    c.recv("input_audio_buffer.committed")
    c.send({"type": "response.create", "event_id": "answer"})
    c.recv("response.done")
    c.send({"type": "output_audio_buffer.clear", "event_id": "noaudio"})
    c.recv("error", error__event_id="noaudio")
    c.close()
    return c.events[0]["session"]["id"]


def resumed(base: str) -> str:
    """Play the ``resumed`` session; its id."""
    c = _speech_session(base)
    session_id, token = c.events[0]["session"]["id"], c.events[0]["resume_token"]
    c.send({"type": "response.create", "event_id": "talk"})
    c.recv("response.created")
    c.send({"type": "response.cancel", "event_id": "stop"})  # while it runs (or refused, had it ended)
    c.recv("response.done")
    c.send({"type": "input.text.append", "event_id": "typed", "text": "never mind"})
    c.send({"type": "input.cancel", "event_id": "drop"})
    c.recv("input_audio_buffer.cleared")
    c.ws.close()  # the connection drops without session.close: the session waits for a resume
    time.sleep(0.5)
    back = _Client(f"{base}/v1/realtime?model=gpt-realtime")
    back.send({"type": "session.resume", "event_id": "back", "session_id": session_id, "resume_token": token})
    back.recv("session.resumed")
    back.close()
    return session_id


def world(base: str) -> str:
    """Play the ``world`` session; its id."""
    c = _Client(f"{base}/v1/world")
    c.send({"type": "session.start", "prompt": "green hills by the sea", "seed": 7, "width": 48, "height": 32, "fps": 8, "frames_per_chunk": 2, "max_chunks": 4, "pacing": "fast"})
    session_id = c.recv("session.started")["session_id"]
    keys = {"track": "camera", "schema": "duplex_es.camera_keys.v1"}
    c.send({"type": "session.interaction", "event_id": 1, "controls": [{**keys, "data": {"keys": ["W"]}}]})
    c.send({"type": "session.interaction", "event_id": 2, "prompt": "sunset over the hills"})
    c.recv("world.chunk")
    c.send({"type": "session.interaction", "event_id": 2, "prompt": "again"})  # the same id: refused
    c.recv("error")
    mark = len(c.events)
    c.send({"type": "session.reset", "event_id": "reset"})
    c.recv("session.reset_done", after=mark)
    c.send({"type": "session.interaction", "event_id": 3, "controls": [{**keys, "data": {"keys": ["J"]}}]})
    c.recv("world.chunk", after=mark, epoch=1, chunk_index=3)
    c.close()
    return session_id


#: Corpus file name → the script that plays its session against ``ws://…`` and returns its id.
SCRIPTS: dict[str, Callable[[str], str]] = {
    "spoken_turn": spoken_turn,
    "barge_in": barge_in,
    "function_call": function_call,
    "full_duplex": full_duplex,
    "judged_turn": judged_turn,
    "refusals": refusals,
    "resumed": resumed,
    "world": world,
}


def make_corpus(out_dir: str | Path, *, only: Optional[list[str]] = None, work_dir: Optional[str] = None) -> dict[str, tuple[str, int]]:
    """Play the scripts (``only`` some of them) on a new log and write each session to
    ``out_dir/<name>.jsonl``. Returns name → (session id, bytes written).

    Raises:
        TimeoutError: a session did not get an event it waited for (see the serve and worker
            logs in ``work_dir``, kept when given).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="duplex-es-corpus-") as tmp:
        work = Path(work_dir) if work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{work / 'corpus.db'}"
        db = Database(url)
        upgrade(db)
        port = free_port()
        server = start_server(url, port, work / "serve.log", ["--log-level", "WARNING"])
        worker = start_worker(url, work / "worker.log", ["--chunk-ms", "500"])
        made: dict[str, str] = {}
        try:
            wait_healthy(port, server)
            for name, script in SCRIPTS.items():
                if only is None or name in only:
                    made[name] = script(f"ws://127.0.0.1:{port}")
            time.sleep(1.0)  # let the worker's last answers land before the log is read
        finally:
            worker.stop()
            server.stop()
        log = EventLog(db)
        written: dict[str, tuple[str, int]] = {}
        for name, session_id in made.items():
            path = out / f"{name}.jsonl"
            with path.open("w", encoding="utf-8") as f:
                write_jsonl(log, f, session_id)
            written[name] = (session_id, path.stat().st_size)
        db.dispose()
    return written
