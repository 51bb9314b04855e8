"""Voice calls over SIP: what a SIP dialog *is* to the rest of voicegate.

This package is where internal/sip meets the session, the pipeline and the phone flows
(internal/telephony); the rest of internal/sip is a plain protocol library that imports none of them
(tests/test_import_graph.py holds it to that).

- handler.py: VoiceCallHandler, the CallHandler that gives each dialog RTP media, a session and a pipeline
- call.py: one call's own state (SipVoiceCall), its SDP and SRTP rules, the call's log lines
- dtmf.py: key presses out (send_dtmf, POST /calls/{id}/dtmf)
- transfer.py: cold (blind) transfer with REFER, the allow-list, the transfer tool
- warm_transfer.py: hold the caller, brief the target, bridge the two

Every module logs a call's lines under one logger, "voicegate.internal.sip.voice" (or a child of it).
"""

from voicegate.internal.sip.voice.call import SIP_CALL_ID, SIP_OUTBOUND, SipVoiceCall
from voicegate.internal.sip.voice.handler import AT_CAPACITY, VoiceCallHandler

__all__ = ["AT_CAPACITY", "SIP_CALL_ID", "SIP_OUTBOUND", "SipVoiceCall", "VoiceCallHandler"]
