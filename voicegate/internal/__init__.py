"""voicegate's libraries (SIP, media, speech, turn-taking, memory, ...): no public API (docs/architecture.md)."""

from voicegate._import_name import require_name

require_name(__name__, "voicegate.internal")
