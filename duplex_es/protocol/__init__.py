"""The Realtime wire: client events → commands, committed events → server events, in the GA
vocabulary or (per connection) the beta one."""

from duplex_es.protocol.beta import client_event_to_ga, wire_to_beta
from duplex_es.protocol.inbound import (
    CLIENT_EVENT_TYPES,
    MAX_FRAME_BYTES,
    CommandError,
    ResumeRequest,
    command_from_realtime,
    parse_frame,
    resume_from_query,
    resume_request,
)
from duplex_es.protocol.outbound import (
    EXTENSION_EVENT_TYPES,
    encode_wire,
    server_event_seq,
    split_server_event_seq,
)
from duplex_es.protocol.wire import SILENT_EVENT_TYPES, project

__all__ = [
    "CLIENT_EVENT_TYPES",
    "EXTENSION_EVENT_TYPES",
    "SILENT_EVENT_TYPES",
    "MAX_FRAME_BYTES",
    "CommandError",
    "ResumeRequest",
    "resume_from_query",
    "resume_request",
    "client_event_to_ga",
    "command_from_realtime",
    "encode_wire",
    "parse_frame",
    "project",
    "server_event_seq",
    "split_server_event_seq",
    "wire_to_beta",
]
