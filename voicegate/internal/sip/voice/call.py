"""A SIP voice call's own state and the rules that need nothing else: where our media goes in SDP,
whose memory an outbound call uses, how SRTP keys are applied, where a call's events go.

`SipVoiceCall` is one call (its RTP session, its session and pipeline once they exist, the SDP
versions and SRTP keys it has used); `handler.VoiceCallHandler` drives it through the dialog.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from voicegate.internal.audio.rtp_session import MediaDirection, RtpSession
from voicegate.internal.audio.srtp import SrtpContext
from voicegate.internal.config.sections import SipConfig, split_host_port
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.event_envelope import Event
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.phone_numbers import normalise_e164
from voicegate.internal.pipeline.events import ReleaseEvent, StateEvent, TimingEvent, TranscriptEvent, TurnEvent
from voicegate.internal.pipeline.idle import IdleEvent
from voicegate.internal.pipeline.pipeline import VoicePipeline
from voicegate.internal.pipeline.thinking import ThinkingEvent
from voicegate.internal.session import Session
from voicegate.internal.sip.caller import unless_shared
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.sdes import SrtpKeys, new_key
from voicegate.internal.sip.sdp import Negotiated
from voicegate.internal.sip_grammar.uri import SipUri
from voicegate.internal.telephony.events import AmdEvent, DigitsEvent, TransferEvent, VoicemailEvent
from voicegate.internal.telephony.leg_media import MediaEndpoint
from voicegate.internal.turn.events import OverlapEvent

log = logging.getLogger("voicegate.internal.sip.voice")  # one logger for a call's lines, whichever module writes them

SIP_OUTBOUND: Slot[bool] = Slot("sip.outbound")  # True on a call voicegate placed (send_dtmf is offered there)
SIP_CALL_ID: Slot[str] = Slot("sip.call_id")  # the call's SIP Call-ID, for operators and POST /calls


class CallLog:
    """The event sink of SIP calls: there is no DataChannel, so events go to the log (content fields are
    dropped there unless telemetry.log_content is on)."""

    def __init__(self, call_id: str) -> None:
        self._call_id = call_id

    def emit(self, event: Event) -> None:
        if isinstance(event, TranscriptEvent) and event.final:
            log.info("sip call transcript", extra={"call_id": self._call_id, "role": event.role, "text": event.text,
                                                   "replaces": event.replaces})
        elif isinstance(event, StateEvent):
            log.debug("sip call state", extra={"call_id": self._call_id, "state": event.state})
        elif isinstance(event, (DigitsEvent, AmdEvent, VoicemailEvent, TransferEvent, IdleEvent)):  # the phone flows
            log.info("sip call %s", event.type, extra={"call_id": self._call_id,
                                                       "detail": event.model_dump(exclude={"type", "ts"})})
        elif isinstance(event, (ReleaseEvent, TurnEvent, ThinkingEvent)):  # how the turn was taken: no content
            log.info("sip call %s", event.type, extra={"call_id": self._call_id,
                                                       "detail": event.model_dump(exclude={"type", "ts"})})
        elif isinstance(event, OverlapEvent):  # a sound over the agent that was no turn: not its sentence
            log.info("sip call overlap", extra={"call_id": self._call_id,
                                                "detail": event.model_dump(exclude={"type", "ts", "sentence"})})
        elif isinstance(event, TimingEvent):  # emitted only with pipeline.debug; metrics record them always
            log.info("sip call timing", extra={"call_id": self._call_id, "stage": event.stage, "ms": event.ms,
                                               "turn": event.turn})


def direction(value: str) -> MediaDirection:
    if value not in ("sendrecv", "sendonly", "recvonly", "inactive"):
        raise ValueError(f"not an SDP direction: {value!r}")
    return value  # type: ignore[return-value]


def secure(voice: SipVoiceCall, keys: SrtpKeys | None) -> SrtpKeys | None:
    """SRTP with these keys from now on; returns the keys the media runs with, whose local key is what
    our SDP must carry.

    A key never starts counting again: the same keys (a re-INVITE) keep the running context, a new peer
    key keeps our sending session (its packet indices go on), and a new suite with our old key gets a
    new key of ours, since a fresh session under the old key would repeat its keystream."""
    old, context = voice.srtp_keys, voice.srtp
    if keys == old:
        return keys
    if keys is None:
        context = None
    elif old is not None and context is not None and keys.local == old.local and keys.suite == old.suite:
        context = context.with_remote(keys.remote)
    else:
        if old is not None and keys.local == old.local:
            keys = replace(keys, local=new_key())
        context = SrtpContext(keys.suite, keys.local, keys.remote)
    voice.srtp_keys, voice.srtp = keys, context
    voice.rtp.secure(context)
    log.info("sip call media security", extra={"call_id": voice.call_id, "srtp": keys.suite if keys else "off"})
    return keys


def media_address(config: SipConfig, toward: str) -> str:
    """The address we put in SDP: sip.public_address, the bind host, or our interface toward the peer."""
    if config.public_address:
        return split_host_port(config.public_address, 0)[0]  # "host:port" names the SIP port, not RTP
    if config.bind_host not in ("0.0.0.0", "::", ""):
        return config.bind_host
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((toward, 9))  # no packet is sent; this only picks the interface
        return str(probe.getsockname()[0])
    return "127.0.0.1"


def callee_identity(target: str, config: SipConfig, shared_numbers: frozenset[str] = frozenset()) -> CallerIdentity:
    """Whose memory an outbound call uses: by default nobody's. We know which number we dialled, not who
    answers it (a family phone, a colleague, a reassigned number), and that person would hear what the
    agent remembers about the number's owner. `sip.outbound_memory = "dialled"` keys memory on the
    number for deployments that know each number is one person's."""
    if config.outbound_memory == "none":
        return CallerIdentity.anonymous("outbound call")
    try:
        user = SipUri.parse(target if ":" in target else f"sip:{target}").user or ""
    except ValueError:
        return CallerIdentity.anonymous("unparseable target")
    number = normalise_e164(user, config.default_region) if user else None
    if not number:
        return CallerIdentity.anonymous("not a number")
    return unless_shared(CallerIdentity("sip", number, "dialled by us"), shared_numbers)


@dataclass(slots=True)
class MediaRoute:
    """Where one SIP leg's media goes: the RTP session's callbacks read it at each 20 ms tick and key press, so
    a warm transfer re-routes a leg (to a hold sound, a briefing, the other leg) by setting `endpoint`.
    `call_id` follows the dialog's (an outbound call learns it late); `endpoint` is None before media runs
    (an outbound call ringing) and after it stops: then nothing is sent and what arrives is dropped."""

    call_id: str
    endpoint: MediaEndpoint | None = None


@dataclass
class SipVoiceCall:
    call_id: str
    rtp: RtpSession
    session: Session | None = None
    pipeline: VoicePipeline | None = None
    negotiated: Negotiated | None = None
    ended: bool = False
    # Where the leg's audio and key presses go (the pipeline once media runs; a hold or bridge port meanwhile).
    route: MediaRoute = field(default_factory=lambda: MediaRoute(""))
    # RFC 3264 8: every SDP we send in one call keeps the o= session id and bumps its version by one.
    sdp_session_id: int = field(default_factory=lambda: secrets.randbelow(2**31))
    sdp_version: int = -1
    srtp_offered: bytes | None = None  # the SRTP key in our own offer (outbound, offerless INVITE)
    outbound: bool = False  # voicegate placed this call (POST /calls, `voicegate call`, a warm transfer's target)
    srtp_keys: SrtpKeys | None = None  # what the media runs with, when it is SRTP
    srtp: SrtpContext | None = None  # the running context of those keys (its sending session goes on)
    dialog: Dialog | None = None  # once established
    # Told (with the SIP reason) when the call ends, whoever ends it: a warm transfer follows its legs.
    on_end: list[Callable[[str], None]] = field(default_factory=list)
    # The session's end reason when this call ends ("" = "sip <reason>"): a bridged call ends "transferred".
    end_reason: str = ""

    def next_sdp_version(self) -> int:
        self.sdp_version = self.sdp_session_id if self.sdp_version < 0 else self.sdp_version + 1
        return self.sdp_version
