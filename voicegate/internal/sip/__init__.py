"""voicegate's SIP stack (RFC 3261, 3264, 3581, 4566, 7616), one module per protocol concept.

Bottom up, on internal/sip_grammar (`syntax`, `uri`): `via`, `headers`, `message` (+ `framer` for TCP)
parse and serialise; `sdp` describes and negotiates media; `digest` authenticates; `transport` moves bytes; `timers` and
`transaction` make delivery reliable; `dialog` holds call state; `stack`, `calls`, `uas`, `uac` and
`ua` are the user agent, whose application contract is in `handler`; `caller` reads who is calling.
"""

from voicegate.internal.sip.dialog import Dialog, DialogId, DialogState
from voicegate.internal.sip.digest import AuthResult, DigestAuthenticator, authorization_header, choose_challenge
from voicegate.internal.sip.framer import FramingError, KeepAlive, StreamFramer
from voicegate.internal.sip.headers import COMPACT_FORMS, Headers
from voicegate.internal.sip.message import (
    SipMessage,
    SipParseError,
    SipRequest,
    SipResponse,
    make_response,
    parse,
)
from voicegate.internal.sip.salvage import salvage_request
from voicegate.internal.sip.sdp import (
    Negotiated,
    NoCommonCodec,
    SdpError,
    SessionDescription,
    build_answer,
    build_offer,
    negotiate,
)
from voicegate.internal.sip.timers import TimerSettings
from voicegate.internal.sip.transaction import TransactionLayer
from voicegate.internal.sip.transport import Address, TransportLayer
from voicegate.internal.sip.ua import (
    CallFailed,
    CallHandler,
    CallRejected,
    IncomingCall,
    OutboundCall,
    Rejection,
    UserAgent,
)
from voicegate.internal.sip.via import Via
from voicegate.internal.sip_grammar.uri import NameAddr, SipUri, UriError

__all__ = [
    "COMPACT_FORMS",
    "Address",
    "AuthResult",
    "CallFailed",
    "CallHandler",
    "CallRejected",
    "Dialog",
    "DialogId",
    "DialogState",
    "DigestAuthenticator",
    "FramingError",
    "Headers",
    "IncomingCall",
    "KeepAlive",
    "NameAddr",
    "Negotiated",
    "NoCommonCodec",
    "OutboundCall",
    "Rejection",
    "SdpError",
    "SessionDescription",
    "SipMessage",
    "SipParseError",
    "SipRequest",
    "SipResponse",
    "SipUri",
    "StreamFramer",
    "TimerSettings",
    "TransactionLayer",
    "TransportLayer",
    "UriError",
    "UserAgent",
    "Via",
    "authorization_header",
    "build_answer",
    "build_offer",
    "choose_challenge",
    "make_response",
    "negotiate",
    "parse",
    "salvage_request",
]
