"""Speech-to-text providers: pocketsphinx (local), OpenAI-compatible transcription, Deepgram streaming."""

from voicegate.internal.stt.base import SpeechToText, SttError, SttStream, Transcript

__all__ = ["SpeechToText", "SttError", "SttStream", "Transcript"]
