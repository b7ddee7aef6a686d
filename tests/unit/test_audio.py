"""Audio math: G.711 codecs, bytes per ms of each declared format, resampling."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from duplex_es.audio import FORMATS, alaw_decode, alaw_encode, bytes_per_ms, resample_pcm16, ulaw_decode, ulaw_encode


def test_bytes_per_ms_of_every_declared_format():
    assert {f: bytes_per_ms(*f) for f in FORMATS} == {
        ("audio/pcm", 24000): 48, ("audio/pcm", 16000): 32, ("audio/pcmu", 8000): 8, ("audio/pcma", 8000): 8
    }


@pytest.mark.parametrize("encode,decode", [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)], ids=["mu-law", "a-law"])
def test_g711_round_trips_and_keeps_speech_quality(encode, decode):
    codes = bytes(range(256))
    back = encode(decode(codes))
    # Every code survives but mu-law's negative zero (0x7F), which encodes as positive zero.
    assert [i for i in range(256) if back[i] != i] in ([], [0x7F])
    x = (np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440) * 20000).astype(np.int16)
    y = decode(encode(x)).astype(np.float64)
    snr = 10 * np.log10(np.mean(x.astype(np.float64) ** 2) / np.mean((x - y) ** 2))
    assert snr > 30  # G.711's ~38 dB for a full-scale tone


def test_g711_decoding_matches_the_standard_tables():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # CPython's reference, gone in 3.13
    codes = bytes(range(256))
    assert np.array_equal(ulaw_decode(codes), np.frombuffer(audioop.ulaw2lin(codes, 2), "<i2"))
    assert np.array_equal(alaw_decode(codes), np.frombuffer(audioop.alaw2lin(codes, 2), "<i2"))


def test_resampling_keeps_duration_and_is_deterministic():
    tone = (np.sin(np.arange(24000) / 24000 * 2 * np.pi * 300) * 10000).astype("<i2").tobytes()
    down = resample_pcm16(tone, 24000, 16000)
    assert len(down) == 16000 * 2 and resample_pcm16(tone, 24000, 16000) == down
    assert resample_pcm16(tone, 24000, 24000) is tone
