"""Speech synthesis for the reference engine: espeak-ng through the ``espeakng-loader`` wheel.

The library is driven with ctypes in synchronous mode; its word events give the text/audio marks
the playback ledger aligns transcripts with. Output is deterministic for the same text and voice.
"""

from __future__ import annotations

import ctypes
import threading

import attrs
import numpy as np

from duplex_es.audio.resample import resample_pcm16

__all__ = ["Synthesizer", "Synthesis", "WordMark", "ESPEAK_VOICES"]

#: The Realtime voice names mapped to espeak-ng voices (American English with a variant).
ESPEAK_VOICES = {
    "alloy": "en-us",
    "ash": "en-us+m3",
    "ballad": "en-us+m7",
    "coral": "en-us+f2",
    "echo": "en-us+m1",
    "sage": "en-us+f3",
    "shimmer": "en-us+f4",
    "verse": "en-us+m5",
    "marin": "en-us+f1",
    "cedar": "en-us+m2",
}

# espeak-ng's C API (speak_lib.h).
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@attrs.frozen
class WordMark:
    """A word starts at character ``char_offset`` of the text and at ``audio_ms`` of the audio."""

    char_offset: int
    audio_ms: int


@attrs.frozen
class Synthesis:
    """Synthesized speech: mono PCM16 LE at ``rate`` Hz, with one mark per word."""

    pcm: bytes
    rate: int
    marks: tuple[WordMark, ...]

    @property
    def duration_ms(self) -> int:
        """Length of the audio in ms."""
        return len(self.pcm) // 2 * 1000 // self.rate


#: espeak-ng's ``espeakRATE`` parameter (words per minute) and its bounds.
_ESPEAK_RATE = 1
_DEFAULT_WPM, _MIN_WPM, _MAX_WPM = 175, 80, 450


def words_per_minute(speed: float) -> int:
    """espeak-ng's speaking rate for a GA ``speed`` (1.0 → 175 wpm), within what it speaks."""
    return max(_MIN_WPM, min(_MAX_WPM, round(_DEFAULT_WPM * speed)))


class Synthesizer:
    """espeak-ng speech synthesis, deterministic across calls and processes.

    espeak-ng keeps synthesis state in C statics (pitch-flutter phase, wave phase) that
    ``espeak_Initialize`` does not reset, so the same text spoken twice in one process comes out
    slightly different. Replay and crash recovery need the same bytes every time, so each
    utterance runs in a freshly loaded copy of the library (``dlopen`` … ``dlclose``, about
    10 ms), which starts from the library's pristine state. The data files stay in the page
    cache; nothing else is reloaded.

    Raises:
        RuntimeError: if the library cannot be initialized or the voice is unknown.
    """

    _lock = threading.Lock()

    def __init__(self) -> None:
        import espeakng_loader

        self._path = espeakng_loader.get_library_path()
        self._data = str(espeakng_loader.get_data_path()).encode()
        self.native_rate = self._run("en-us", lambda lib, rate: rate)

    def _run(self, voice: str, body):  # noqa: ANN001, ANN202
        """Load the library, initialize it with ``voice``, call ``body(lib, rate)``, unload it."""
        import _ctypes

        lib = ctypes.CDLL(self._path)
        try:
            rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, self._data, 0)
            if rate <= 0:
                raise RuntimeError(f"espeak-ng failed to initialize (returned {rate})")
            if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise RuntimeError(f"espeak-ng has no voice {voice!r}")
            result = body(lib, rate)
            lib.espeak_Terminate()
            return result
        finally:
            handle = lib._handle
            del lib
            _ctypes.dlclose(handle)

    def synthesize(self, text: str, rate: int, voice: str = "alloy", speed: float = 1.0) -> Synthesis:
        """Speak ``text`` in ``voice`` (a Realtime voice name, see :data:`ESPEAK_VOICES`) at
        ``speed`` (GA ``audio.output.speed``: 1.0 is espeak-ng's 175 words a minute; it speaks
        80 to 450) and return PCM16 at ``rate`` Hz with word marks.

        Raises:
            KeyError: for a voice name with no espeak-ng mapping.

        Marks come from espeak-ng's word events: the character offset of each word in ``text``
        (0-based) and the sample where it starts, converted to ms.
        """
        chunks: list[np.ndarray] = []
        words: list[tuple[int, int]] = []

        def on_synth(wav, n, events) -> int:  # noqa: ANN001 - ctypes callback
            if n > 0:
                chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            i = 0
            while events[i].type != _EVENT_LIST_TERMINATED:
                ev = events[i]
                if ev.type == _EVENT_WORD:
                    words.append((ev.text_position - 1, ev.sample))
                i += 1
            return 0

        callback = _Callback(on_synth)  # must outlive the synthesis: C holds the pointer
        data = text.encode("utf-8")

        def speak(lib, native_rate: int) -> int:  # noqa: ANN001
            lib.espeak_SetSynthCallback(callback)
            if speed != 1.0:
                lib.espeak_SetParameter(_ESPEAK_RATE, words_per_minute(speed), 0)
            err = lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None)
            if err != 0:
                raise RuntimeError(f"espeak_Synth failed with error {err}")
            lib.espeak_Synchronize()
            return native_rate

        with self._lock:
            native_rate = self._run(ESPEAK_VOICES[voice], speak)
        native = np.concatenate(chunks).astype("<i2").tobytes() if chunks else b""
        pcm = resample_pcm16(native, native_rate, rate)
        marks = tuple(WordMark(char_offset=max(0, pos), audio_ms=sample * 1000 // native_rate) for pos, sample in words)
        return Synthesis(pcm=pcm, rate=rate, marks=marks)
