"""Sessions: the conversation state that outlives a transport, and the manager of live sessions."""

from voicegate.internal.session.manager import SessionLimitReached, SessionManager
from voicegate.internal.session.session import Conversation, Session, TransportKind

__all__ = ["Conversation", "Session", "SessionLimitReached", "SessionManager", "TransportKind"]
