"""Speech recognition for the reference engine: pocketsphinx with the en-US model its wheel ships."""

from __future__ import annotations

import logging
import os

from duplex_es.audio.resample import resample_pcm16

__all__ = ["Recognizer", "ASR_RATE"]

#: The rate the pocketsphinx en-US acoustic model expects (Hz).
ASR_RATE = 16000


class Recognizer:
    """One pocketsphinx decoder, loaded once per worker process (about 0.3 s).

    Decoding is deterministic: the same audio always gives the same transcript.
    """

    def __init__(self) -> None:
        from pocketsphinx import Decoder  # imported here: loading it prints to stderr

        # pocketsphinx logs model loading at INFO to stderr; keep worker logs readable.
        self._decoder = Decoder(samprate=ASR_RATE, logfn=os.devnull)
        logging.getLogger(__name__).info("pocketsphinx en-US model loaded")

    def transcribe(self, pcm16: bytes, rate: int) -> str:
        """Transcribe mono PCM16 LE audio at ``rate`` Hz; ``""`` when nothing is recognized."""
        if len(pcm16) < 2:
            return ""
        audio = resample_pcm16(pcm16, rate, ASR_RATE)
        d = self._decoder
        d.start_utt()
        d.process_raw(audio, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        return hyp.hypstr.strip() if hyp is not None else ""
