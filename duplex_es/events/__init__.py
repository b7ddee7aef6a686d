"""The event catalogue and its codec: the only vocabulary the log speaks."""

from duplex_es.events.audio import audio_bytes, join_audio, segments_audio
from duplex_es.events.base import Event, Refusal, event, registry
from duplex_es.events.catalogue import *  # noqa: F401,F403
from duplex_es.events.catalogue import __all__ as _catalogue_all
from duplex_es.events.world import *  # noqa: F401,F403
from duplex_es.events.world import __all__ as _world_all
from duplex_es.events.duplex import *  # noqa: F401,F403
from duplex_es.events.duplex import __all__ as _duplex_all
from duplex_es.events.ticks import TickAnswer, TickCanceller, TickIdentity, TickRequest
from duplex_es.events.codec import (
    EventDecodeError,
    decode,
    decode_data,
    encode,
    encode_data,
    register_upcaster,
    to_plain,
)

__all__ = [
    "Event",
    "Refusal",
    "audio_bytes",
    "join_audio",
    "segments_audio",
    "event",
    "registry",
    "EventDecodeError",
    "decode",
    "decode_data",
    "encode",
    "encode_data",
    "register_upcaster",
    "to_plain",
    "TickAnswer",
    "TickCanceller",
    "TickIdentity",
    "TickRequest",
    *_catalogue_all,
    *_world_all,
    *_duplex_all,
]
