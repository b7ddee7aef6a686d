"""The reference speech engine (CPU): pocketsphinx ASR, an echo reply, espeak-ng TTS."""
