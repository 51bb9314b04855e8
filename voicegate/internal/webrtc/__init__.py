"""A browser's WebRTC call as voicegate sees it: the glue between WHIP and aiortc (internal/signaling,
internal/peer) and the session, the pipeline and its events, as internal/sip/voice/ is for a SIP dialog.

- whip.py: the WHIP endpoint (RFC 9725): an offer in, a session and its pipeline built, the answer out
- resume.py: resume tokens, so a reconnecting browser finds its live session again
- call.py: WebRtcCall, one peer connection attached to one session for as long as the transport lives
"""
