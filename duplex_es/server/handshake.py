"""A deadline on HTTP request heads, so a client that never finishes its handshake cannot hold a
connection open forever.

uvicorn closes a keep-alive connection that stays idle after a response (``timeout_keep_alive``),
but sets no deadline before a request head is complete: a client that opens TCP and sends half a
request line, or trickles headers a byte at a time (slowloris), or never completes the
WebSocket upgrade, keeps its socket, protocol object and parser for as long as it likes.
:func:`handshake_protocol` wraps uvicorn's HTTP protocol so that a connection whose request
head (request line and headers; for ``/v1/realtime`` and ``/v1/world`` that is the whole
WebSocket upgrade request) is not complete within the timeout is closed, and so is one whose
WebSocket handshake never completed after the upgrade. Once accepted, a WebSocket answers to
uvicorn's pings (``ws_ping_interval`` / ``ws_ping_timeout``, 20 s each) instead.

The WebSocket library refuses a request line or header line over 8,192 bytes without answering
or closing (uvicorn's ``websockets-sansio`` protocol then waits for ever: found by
tests/system/test_fuzz.py with a long ``?model=``), so such lines are refused before the upgrade
with 400 (httptools' parser; the deadline covers the rest).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from uvicorn.protocols.http.auto import AutoHTTPProtocol

__all__ = ["handshake_protocol", "DEFAULT_HANDSHAKE_TIMEOUT_MS"]

log = logging.getLogger(__name__)

#: How long a connection may take to send a complete request head (ms).
DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000

#: The longest request target and header line accepted (bytes): under the WebSocket library's
#: 8,192-byte line limit, with room for the method, version and header name.
MAX_LINE_BYTES = 8_000


def handshake_protocol(timeout_ms: int, base: type = AutoHTTPProtocol) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``base`` (httptools' or h11's; both keep ``loop``,
    ``transport`` and the request ``cycle``) with a handshake deadline: a connection is closed
    ``timeout_ms`` after it opened, or after its last response completed, unless a request is
    being answered by then or it became a WebSocket whose handshake completed. With httptools, a
    request target or header line over :data:`MAX_LINE_BYTES` is answered 400 at once (h11 never
    calls those hooks; the deadline still applies). Pass the result as ``uvicorn.run(http=...)``.

    Raises:
        ValueError: ``timeout_ms`` is not positive.
    """
    if timeout_ms <= 0:
        raise ValueError(f"the handshake timeout must be positive, got {timeout_ms} ms")

    class HandshakeDeadline(base):  # type: ignore[misc, valid-type]
        _deadline: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request head (keep-alive, pipelining) gets the same deadline

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(timeout_ms / 1000, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            if len(self.url) > MAX_LINE_BYTES:
                # httptools turns this into an HttpParserError: uvicorn answers 400 and closes.
                raise ValueError(f"request target over {MAX_LINE_BYTES} bytes")

        def on_header(self, name: bytes, value: bytes) -> None:
            if len(name) + len(value) > MAX_LINE_BYTES:
                raise ValueError(f"header line over {MAX_LINE_BYTES} bytes")
            super().on_header(name, value)

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            upgraded = self.transport.get_protocol()
            if upgraded is not self:
                if getattr(upgraded, "handshake_complete", True):
                    return  # a WebSocket the application accepted (or refused with a response)
                log.info("closing a WebSocket from %s: its handshake did not complete within %d ms", _peer(self.client), timeout_ms)
                self.transport.close()
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a whole request head arrived and is being answered
            log.info("closing a connection from %s: no complete request head within %d ms", _peer(self.client), timeout_ms)
            self.transport.close()

    HandshakeDeadline.__name__ = HandshakeDeadline.__qualname__ = f"HandshakeDeadline{base.__name__}"
    return HandshakeDeadline


def _peer(client: Optional[tuple[str, int]]) -> str:
    return f"{client[0]}:{client[1]}" if client else "an unknown peer"
