"""Text-to-speech providers: espeak-ng (local), OpenAI-compatible speech."""

from voicegate.internal.tts.base import TextToSpeech, TtsError

__all__ = ["TextToSpeech", "TtsError"]
