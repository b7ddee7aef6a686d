"""Audio math shared by the domain (VAD, durations) and the engines: PCM16 and G.711 codecs,
resampling. Pure functions of their inputs (numpy), no project imports. The submodule
:mod:`duplex_es.audio.silero` (not imported here) runs the Silero VAD network with onnxruntime."""

from duplex_es.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from duplex_es.audio.pcm import FORMATS, bytes_per_ms, decode_to_pcm16, encode_from_pcm16, is_supported
from duplex_es.audio.resample import resample_pcm16

__all__ = [
    "FORMATS",
    "alaw_decode",
    "alaw_encode",
    "bytes_per_ms",
    "decode_to_pcm16",
    "encode_from_pcm16",
    "is_supported",
    "resample_pcm16",
    "ulaw_decode",
    "ulaw_encode",
]
