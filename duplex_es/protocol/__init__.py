"""The Realtime wire: client frames → commands, committed events → server events."""

from duplex_es.protocol.inbound import CLIENT_EVENT_TYPES, MAX_FRAME_BYTES, parse_frame
from duplex_es.protocol.outbound import (
    EXTENSION_EVENT_TYPES,
    encode_wire,
    project,
    server_event_seq,
    split_server_event_seq,
)

__all__ = [
    "CLIENT_EVENT_TYPES",
    "EXTENSION_EVENT_TYPES",
    "MAX_FRAME_BYTES",
    "encode_wire",
    "parse_frame",
    "project",
    "server_event_seq",
    "split_server_event_seq",
]
