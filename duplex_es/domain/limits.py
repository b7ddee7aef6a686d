"""What a session may ask for: sizes, lengths and names with a bound.

Each bound keeps one client from taking a worker or the log hostage; each refusal has its own
error code (docs/protocol.md).
"""

from __future__ import annotations

__all__ = [
    "MIN_COMMIT_MS",
    "MAX_BUFFER_MS",
    "MAX_INPUT_TEXT_CHARS",
    "MAX_INSTRUCTIONS_CHARS",
    "MAX_OUT_OF_BAND_RESPONSES",
    "VOICES",
]

#: The shortest audio ``input_audio_buffer.commit`` accepts without text (OpenAI's rule).
MIN_COMMIT_MS = 100

#: The longest audio the input buffer holds before a commit (10 minutes of the input clock).
MAX_BUFFER_MS = 10 * 60 * 1000

#: The most text one user item may carry (``input.text.append``, summed until the commit).
MAX_INPUT_TEXT_CHARS = 16_384

#: The longest ``instructions`` a session or response may set.
MAX_INSTRUCTIONS_CHARS = 16_384

#: The voices a session may choose: OpenAI's built-in voice names; the reference engine maps
#: each to an espeak-ng voice.
VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"})

#: Out-of-band responses (``conversation: "none"``) that may run at once beside the default one.
MAX_OUT_OF_BAND_RESPONSES = 3
