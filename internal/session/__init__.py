"""Sessions: the conversation state that outlives a transport, and the manager of live sessions."""

from internal.session.manager import SessionLimitReached, SessionManager
from internal.session.session import Conversation, Session, TransportKind

__all__ = ["Conversation", "Session", "SessionLimitReached", "SessionManager", "TransportKind"]
