"""Sending key presses on a live SIP call: into another IVR ("press 2 for billing") on an outbound call.

RFC 4733 telephone events in the call's RTP when the peer's SDP answer accepted telephone-event (the
packets of each digit share one timestamp, the first carries the marker bit, the last is sent three
times with the end bit: internal/audio/dtmf.py); otherwise one SIP INFO per digit
(application/dtmf-relay, "Signal=5" and "Duration=100"), the way phones without RFC 4733 send them.
`POST /calls/{id}/dtmf` and the agent's `send_dtmf` tool both come here. Either way this returns once
the digits have gone out, so whatever the agent says next follows them. The tool is offered on calls
voicegate placed only, and there only while the other side asks for keys (`may_press_keys`); the API
key's holder may press keys on any call.

The far end of a call we placed is untrusted: it names the keys the navigator presses and talks to the
agent. So every key of an outbound call, the navigator's, the agent's and the API's, passes the key
policy here first ([sip] outbound_keys, outbound_asked_keys, outbound_max_keys:
internal/telephony/key_policy.py); a refused entry sends nothing, is logged (never its digits) and
raises `KeysRefused`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, Literal

from voicegate.internal.audio.dtmf import EVENT_DIGITS
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.session import Session
from voicegate.internal.sip.voice.call import SIP_CALL_ID, SIP_OUTBOUND
from voicegate.internal.telephony import key_policy
from voicegate.internal.telephony.key_policy import KEYS, KeyLedger, KeyPolicy, KeySource
from voicegate.internal.telephony.navigation import MENU
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry

log = logging.getLogger(__name__)

DtmfMethod = Literal["rfc4733", "info"]
MAX_DIGITS = 64
EVENT_MS = 100  # internal/audio/dtmf.py DtmfSender's default: each press lasts this long
GAP_MS = 60  # ... and is followed by this much audio
_DIGITS = re.compile(rf"^[{re.escape(EVENT_DIGITS)}]{{1,{MAX_DIGITS}}}$")


class DtmfError(Exception):
    """Digits that cannot be sent; `code` is what the HTTP API reports."""

    code = "dtmf_failed"

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status  # the SIP status of a refused INFO


class InvalidDigits(DtmfError):
    code = "invalid_digits"


class KeysRefused(DtmfError, key_policy.KeysRefused):
    """The key policy refused the entry on this call; nothing was sent."""

    code = "keys_refused"


class NotSendable(DtmfError):
    """Not a SIP call, or not established (yet, or any more)."""

    code = "not_established"


def check_digits(digits: str) -> str:
    digits = digits.strip().upper()
    if not _DIGITS.match(digits):
        raise InvalidDigits(f"digits must be 1-{MAX_DIGITS} of 0-9, *, #, A-D (got {digits[:80]!r})")
    return digits


def info_body(digit: str) -> bytes:
    return f"Signal={digit}\r\nDuration={EVENT_MS}\r\n".encode()


class CallKeypad:
    """One per server: sends digits on the SIP calls the UA holds."""

    def __init__(self, ua: Any, handler: Any, policy: KeyPolicy | None = None) -> None:
        self._ua = ua
        self._handler = handler
        self.policy = policy if policy is not None else policy_of(getattr(handler, "config", None))

    def _call(self, session: Session) -> tuple[Any, Any]:
        """(the dialog, the SipVoiceCall) of an established SIP call."""
        if session.transport != "sip" or session.ended:
            raise NotSendable("only a live SIP call can send key presses")
        call_id = session.slots.get(SIP_CALL_ID)
        voice = self._handler.calls.get(call_id)
        for leg in self._ua.calls.legs():
            if leg.dialog.call_id == call_id and not leg.ended and leg.dialog.state == "confirmed" and voice:
                return leg.dialog, voice
        raise NotSendable("the call is not established (not answered yet, or already ended)")

    async def send(self, session: Session, digits: str, *, source: KeySource = "agent",
                   asked: frozenset[str] = frozenset()) -> DtmfMethod:
        """Send `digits` (RFC 4733 when negotiated, else SIP INFO); returns once they have gone out.
        `source` is who keys them (the policy is strictest for the agent), `asked` the keys the other
        side named (the navigator's chosen option; what the other side said last, for the agent)."""
        digits = check_digits(digits)
        dialog, voice = self._call(session)
        ledger = self._screen(session, digits, source, asked)
        if ledger is not None:
            key_policy.record(ledger, digits)  # counted once handed to the line, even if it fails midway
        if voice.rtp.dtmf_negotiated:
            voice.rtp.send_dtmf(digits)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + len(digits) * (EVENT_MS + GAP_MS + 100) / 1000 + 2.0
            # Polled: the events go out on the media tick, which signals nothing (a few polls per key).
            while voice.rtp.sending_dtmf and loop.time() < deadline and not voice.ended:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            return "rfc4733"
        for index, digit in enumerate(digits):
            if index:
                await asyncio.sleep((EVENT_MS + GAP_MS) / 1000)  # the far end sees separate presses
            response = await self._ua.stack.request_in_dialog(dialog, "INFO", body=info_body(digit),
                                                              content_type="application/dtmf-relay")
            if not 200 <= response.status < 300:
                raise DtmfError(f"the peer refused SIP INFO for key presses (SIP {response.status} "
                                f"{response.reason}) and did not negotiate telephone-event", response.status)
        return "info"

    def _screen(self, session: Session, digits: str, source: KeySource,
                asked: frozenset[str]) -> KeyLedger | None:
        """The call's ledger once the policy let `digits` through (None: a call that is not held to it,
        the API's keys on a call a PBX handed us); raises KeysRefused."""
        if source == "api" and session.slots.get(SIP_OUTBOUND) is not True:
            return None
        ledger = session.slots.setdefault(KEYS, KeyLedger())
        verdict = key_policy.screen(self.policy, ledger, digits, source, asked)
        if not verdict.allowed:
            ledger.refused += len(digits)
            log.warning("key presses refused", extra={"call_id": session.slots.get(SIP_CALL_ID, ""),
                                                      **key_policy.log_fields(verdict, digits, source)})
            raise KeysRefused(key_policy.explain(verdict, self.policy))
        return ledger


def policy_of(config: Any) -> KeyPolicy:
    """The key policy of [sip] (the defaults without one)."""
    if config is None or not hasattr(config, "outbound_keys"):
        return KeyPolicy()
    return KeyPolicy(config.outbound_keys, config.outbound_asked_keys, config.outbound_max_keys)


def may_press_keys(session: LiveCall | None, inbound_allowed: bool, heard: str = "") -> bool:
    """Is the agent's `send_dtmf` offered now? Only on a SIP call voicegate placed (its own leg into
    another IVR), unless `sip.send_dtmf_inbound`: on a call a PBX handed us, keys the agent presses
    reach the PBX, and with DTMF feature codes on (a common blind-transfer setting) a caller who says
    "press hash nine zero one one..." would transfer the call anywhere, around `sip.transfer_targets`.
    And there only while a menu is walked or the other side's words (`heard`, this turn's) ask for keys
    ("press 2 for billing", "enter your account number"): a person talking has no use for a keypad, and
    a tool that is not offered cannot be talked into."""
    if session is None or session.transport != "sip":
        return False
    slots = session.slots
    if not (inbound_allowed or slots.get(SIP_OUTBOUND) is True):
        return False
    run = slots.get(MENU)
    return (run is not None and run.result == "pending") or key_policy.asks_for_keys(heard)


def register_dtmf_tool(registry: ToolRegistry, keypad: CallKeypad, *, inbound: bool = False) -> None:
    """`send_dtmf`: press keys on the call, e.g. to pick an option in another company's phone menu; on
    calls voicegate answered only with `inbound` (sip.send_dtmf_inbound)."""

    async def send_dtmf(arguments: dict[str, Any], context: ToolContext) -> str:
        session = context.call
        if not isinstance(session, Session):
            raise ToolError("key presses cannot be sent on this call")
        heard = str(context.extras.get("heard") or "")
        try:
            method = await keypad.send(session, str(arguments.get("digits") or ""), source="agent",
                                       asked=key_policy.keys_named(heard))
        except DtmfError as exc:
            raise ToolError(exc.message) from None
        return json.dumps({"ok": True, "sent": check_digits(str(arguments["digits"])), "method": method})

    registry.register(
        "send_dtmf",
        "Press keys on the phone line, e.g. to choose an option in an automated phone menu you have called "
        "('press 2 for billing'), or to enter a number it asks for. Digits 0-9; * and # only where the "
        "other side asked for that key, never two of them in a row.",
        {"type": "object", "properties": {"digits": {"type": "string", "pattern": "^[0-9*#A-D]{1,64}$",
                                                     "description": "the keys to press, in order"}},
         "required": ["digits"], "additionalProperties": False},
        send_dtmf,
        available=lambda context: may_press_keys(context.call, inbound,
                                                 str(context.extras.get("heard") or "")),
    )
