"""A raw Realtime WebSocket client for tests: sends any frame, keeps every event it receives."""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Optional
from urllib.parse import urlencode

from websockets.sync.client import connect

from servers import session_state


class WsClient:
    """One connection to ``/v1/realtime``; ``events`` holds everything received, in order."""

    def __init__(
        self,
        port: int,
        *,
        beta: bool = False,
        model: str = "test-model",
        query: Optional[dict[str, Any]] = None,
        first: Optional[dict[str, Any]] = None,
        wait: bool = True,
        headers: Optional[dict[str, str]] = None,
    ) -> None:
        """Connect (with extra URL ``query`` parameters and HTTP ``headers``, sending ``first``
        at once); with ``wait``, until ``session.created`` — or ``session.resumed`` when resuming."""
        headers = {**({"OpenAI-Beta": "realtime=v1"} if beta else {}), **(headers or {})}
        self.port = port
        self.beta = beta
        url = f"ws://127.0.0.1:{port}/v1/realtime?" + urlencode({"model": model, **(query or {})})
        self.ws = connect(url, max_size=None, additional_headers=headers)
        self.events: list[dict[str, Any]] = []
        self.frames: list[str] = []  # the raw text of each event, for byte-exact comparisons
        self._taken: set[int] = set()
        self.session_id = ""
        self.token: Optional[str] = None  # the newest resume token the server handed over
        if first is not None:
            self.send(first)
        resuming = "resume_session" in (query or {}) or (first or {}).get("type") == "session.resume"
        if wait:
            self.recv("session.resumed" if resuming else "session.created")

    def last_seq(self) -> int:
        """The highest ``server_event_seq`` received (what a resume asks to continue after)."""
        return max((e["server_event_seq"] for e in self.events if "server_event_seq" in e), default=0)

    def drop(self) -> None:
        """Vanish without ``session.close`` (the server sees the connection end)."""
        self.ws.close()

    def send(self, obj: Any) -> None:
        self.ws.send(obj if isinstance(obj, (str, bytes)) else json.dumps(obj))

    def recv(self, until: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        """The earliest event of type ``until`` (whose fields equal ``match``) not returned yet,
        reading from the socket until one arrives. Concurrent streams (two responses) interleave,
        so events are matched, not consumed in order; tests check order on ``events``."""
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if i not in self._taken and ev["type"] == until and all(_get(ev, k) == v for k, v in match.items()):
                    self._taken.add(i)
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {until} {match or ''} within {timeout} s; got {[e['type'] for e in self.events[-15:]]}")
            self._read(left)

    def _read(self, timeout: float) -> None:
        frame = self.ws.recv(timeout=timeout)
        ev = json.loads(frame)
        self.frames.append(frame)
        self.events.append(ev)
        if ev["type"] in ("session.created", "session.resumed") and "resume_token" in ev:
            self.token = ev["resume_token"]
            self.session_id = ev["session"]["id"] if ev["type"] == "session.created" else ev["session_id"]

    def first_of(self, *types: str, timeout: float = 10.0) -> dict[str, Any]:
        """The first event (from the start) whose type is one of ``types``, reading until one arrives."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for ev in self.events[seen:]:
                if ev["type"] in types:
                    return ev
            seen = len(self.events)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"none of {types} within {timeout} s")
            self._read(left)

    def error(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next ``error`` event's ``error`` object."""
        return self.recv("error", timeout)["error"]

    def mark(self) -> int:
        """A position in ``events``, to look at what came after it."""
        return len(self.events)

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.events[mark:]

    # ---------------------------------------------------------------------------- helpers

    def update(self, session: dict[str, Any]) -> dict[str, Any]:
        self.send({"type": "session.update", "session": {"type": "realtime", **session}})
        return self.recv("session.updated")["session"]

    def say(self, text: str) -> None:
        """Append typed text and commit it as a user item."""
        self.send({"type": "input.text.append", "text": text})
        self.send({"type": "input_audio_buffer.commit"})
        item_id = self.recv("input_audio_buffer.committed")["item_id"]
        self.recv("conversation.item.created" if self.beta else "conversation.item.done", **{"item.id": item_id})

    def respond(self, **response: Any) -> dict[str, Any]:
        """``response.create`` and wait for its ``response.done``; returns the response object."""
        self.send({"type": "response.create", **({"response": response} if response else {})})
        created = self.recv("response.created")["response"]["id"]
        return self.recv("response.done", 60, **{"response.id": created})["response"]

    def audio_of(self, response_id: str, item_id: Optional[str] = None) -> bytes:
        """The audio deltas received for a response (one item's, if named)."""
        return b"".join(
            base64.b64decode(e["delta"])
            for e in self.events
            if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id and item_id in (None, e["item_id"])
        )

    def state(self) -> dict[str, Any]:
        return session_state(self.port, self.session_id)

    def close(self) -> None:
        self.send({"type": "session.close"})
        self.recv("session.closed")
        self.ws.close()


def _get(ev: dict[str, Any], dotted: str) -> Any:
    cur: Any = ev
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def pcm_b64(ms: int, value: int = 16) -> str:
    """``ms`` ms of a constant 24 kHz PCM16 signal, base64."""
    return base64.b64encode(int(value).to_bytes(2, "little", signed=True) * (24 * ms)).decode()
