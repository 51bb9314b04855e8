"""Transferring a live SIP call: the allow-list, the transfer's lifecycle, and what the caller hears.

`POST /calls/{id}/transfer` and the agent's `transfer_call` tool both come here. A target is only ever
a name or URI from `sip.transfer_targets`: a transfer makes the caller's phone dial a number of our
choosing, so neither an API client nor a model (which a caller can talk into anything) may name one
freely. Once the REFER is accepted the outcome follows in the background: on success our leg is hung up
(the caller is now talking to the target), on failure the agent says so and the call carries on.
Each transfer goes into the call's ledger of actions (internal/conversation/actions.py): its target's name
and how it ended, for a later "what did you do for me last time".
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from voicegate.internal.config.sections import SipConfig
from voicegate.internal.conversation.actions import record_action, settle_transfer, transfer_action
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.session import Session
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.transfer import ReferSubscription, TransferBusy, TransferOutcome, await_outcome, send_refer
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry

log = logging.getLogger(__name__)

TRANSFER_STATE: Slot[TransferState] = Slot("sip.transfer")  # the TransferState of the call's latest transfer
TRANSFERRED = "transferred"  # the session's end reason after a successful transfer
# How long a failure message waits for the agent to finish what it is saying before speaking over it.
ANNOUNCE_WAIT_S = 10.0
ANNOUNCE_POLL_S = 0.1


def failure_message(name: str) -> str:
    return f"Sorry, I couldn't put you through to {name}. I'm still here. How else can I help?"


EndSession = Callable[[Session, str], Awaitable[None]]
# "ended": the call ended (the phone hung up on us) before a final NOTIFY, so the outcome is unknown;
# many phones hang up the transferring leg as soon as the new call is answered.
# A warm transfer (warm_transfer.py) goes through "holding", "dialling", "briefing", then "connected"
# (the legs are bridged: its success) or "failed" (the caller is back with the agent).
TransferPhase = Literal["referring", "accepted", "succeeded", "failed", "ended", "holding", "dialling", "briefing",
                        "connected"]
TransferMode = Literal["cold", "warm"]
IN_PROGRESS: frozenset[str] = frozenset({"referring", "accepted", "holding", "dialling", "briefing"})


class TransferError(Exception):
    """A transfer that cannot start; `code` is what the HTTP API reports."""

    code = "transfer_failed"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TargetNotAllowed(TransferError):
    code = "target_not_allowed"


class NotTransferable(TransferError):
    """Not a SIP call, not (or no longer) established, or already being transferred."""

    code = "not_transferable"


class TransferRefused(TransferError):
    """The peer answered our REFER with a failure (e.g. 403, 405, 501)."""

    code = "transfer_refused"

    def __init__(self, message: str, status: int, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass
class TransferState:
    target: str  # the allow-list name
    uri: str
    phase: TransferPhase = "referring"
    status: int = 0  # the deciding SIP status (REFER answer or sipfrag), 408 for our timeout
    reason: str = ""
    mode: TransferMode = "cold"


def normalise_name(text: str) -> str:
    return " ".join(text.split()).lower()


def resolve_target(targets: Mapping[str, str], wanted: str) -> tuple[str, str]:
    """(name, URI) for a name (any case and spacing) or for a URI exactly as listed; else TargetNotAllowed."""
    if not targets:
        raise TargetNotAllowed("transfers are disabled: sip.transfer_targets is empty")
    key = normalise_name(wanted)
    if key in targets:
        return key, targets[key]
    for name, uri in targets.items():
        if wanted.strip() == uri:
            return name, uri
    raise TargetNotAllowed(f"{wanted.strip()[:80]!r} is not in sip.transfer_targets (allowed: "
                           f"{', '.join(sorted(targets))})")


class CallTransfers:
    """One per server: transfers of the SIP calls the UA holds."""

    def __init__(self, config: SipConfig, ua: Any, end_session: EndSession) -> None:
        self.targets: dict[str, str] = dict(config.transfer_targets)
        self.timeout_s = config.transfer_timeout_s
        self._ua = ua
        self._end_session = end_session

    @property
    def names(self) -> list[str]:
        return sorted(self.targets)

    def dialog_of(self, session: Session) -> Dialog:
        if session.transport != "sip":
            raise NotTransferable("only SIP calls can be transferred")
        call_id = session.slots.get(SIP_CALL_ID)
        for leg in self._ua.calls.legs():
            if leg.dialog.call_id == call_id and not leg.ended:
                if leg.dialog.state != "confirmed" or leg.awaiting_ack is not None or session.ended:
                    break
                return leg.dialog  # type: ignore[no-any-return]
        raise NotTransferable("the call is not established (not answered yet, or already ended)")

    async def start(self, session: Session, wanted: str, *, tell_caller_if_refused: bool = True) -> TransferState:
        """Send the REFER; returns once the peer accepted it (the outcome then follows in the background).

        Raises TargetNotAllowed, NotTransferable, or TransferRefused (the caller is told unless
        `tell_caller_if_refused` is off: the tool lets the model say it).
        """
        name, uri = resolve_target(self.targets, wanted)
        dialog = self.dialog_of(session)
        busy = session.slots.get(TRANSFER_STATE)
        if isinstance(busy, TransferState) and busy.phase in IN_PROGRESS:
            raise NotTransferable("a transfer of this call is already under way")
        try:
            subscription = self._ua.transfers.open(dialog)
        except TransferBusy as exc:
            raise NotTransferable(str(exc)) from None
        state = TransferState(name, uri)
        session.slots.set(TRANSFER_STATE, state)
        record_action(session.slots, transfer_action(name))  # the call's ledger: settled by _finish
        try:
            refused = await send_refer(self._ua.stack, dialog, uri)
        except BaseException:
            self._ua.transfers.close(subscription)
            raise
        if refused is not None:
            self._ua.transfers.close(subscription)
            self._finish(session, state, refused)
            if tell_caller_if_refused:
                self._ua.calls.spawn(self._tell_caller(session, failure_message(name)))
            raise TransferRefused(f"the transfer to {name} was refused (SIP {refused.status} {refused.reason})",
                                  refused.status, refused.reason)
        state.phase = "accepted"
        log.info("sip transfer accepted", extra={"call_id": dialog.call_id, "transfer_target": name})
        self._ua.calls.spawn(self._follow(session, dialog, subscription, state))
        return state

    async def _follow(self, session: Session, dialog: Dialog, subscription: ReferSubscription,
                      state: TransferState) -> None:
        try:
            outcome = await await_outcome(dialog, subscription, timeout_s=self.timeout_s)
        finally:
            self._ua.transfers.close(subscription)
        self._finish(session, state, outcome)
        if outcome.succeeded:
            await self._end_session(session, TRANSFERRED)  # our BYE, unless the peer has sent one
        elif outcome.stage != "ended":
            await self._tell_caller(session, failure_message(state.target))

    def _finish(self, session: Session, state: TransferState, outcome: TransferOutcome) -> None:
        state.phase = "succeeded" if outcome.succeeded else "ended" if outcome.stage == "ended" else "failed"
        state.status, state.reason = outcome.status, outcome.reason
        settle_transfer(session.slots, state.target, state.phase)
        call_id = session.slots.get(SIP_CALL_ID)
        log.info("sip transfer %s", state.phase, extra={
            "call_id": call_id, "transfer_target": state.target, "stage": outcome.stage,
            "sip_status": outcome.status, "sip_reason": outcome.reason})

    async def _tell_caller(self, session: Session, text: str) -> None:
        await agent_quiet(session)
        if session.pipeline is not None and not session.ended:
            session.pipeline.announce(text)


def transfer_under_way(session: Session) -> bool:
    """A transfer of this call (cold or warm) has started and not ended: the caller is being put through."""
    state = session.slots.get(TRANSFER_STATE)
    return state is not None and state.phase in IN_PROGRESS


async def agent_quiet(session: Session) -> None:
    """Until the agent has finished what it is saying ("putting you through..."), at most ANNOUNCE_WAIT_S:
    news of a transfer follows it rather than cutting it off. Polled: the pipeline has no "quiet" event,
    and this runs once per transfer, not per frame."""
    for _ in range(int(ANNOUNCE_WAIT_S / ANNOUNCE_POLL_S)):
        pipeline = session.pipeline
        if pipeline is None or not pipeline.agent_active:
            break
        await asyncio.sleep(ANNOUNCE_POLL_S)


def _is_sip_call(context: ToolContext) -> bool:
    return context.call is not None and context.call.transport == "sip"


class WarmStarter(Protocol):
    """warm_transfer.WarmTransfers, as the tool and the HTTP route see it."""

    def start(self, session: Session, wanted: str) -> TransferState: ...


async def start_transfer(transfers: CallTransfers, warm: WarmStarter | None, session: Session, wanted: str,
                         mode: str, *, tell_caller_if_refused: bool = True) -> TransferState:
    """A transfer in `mode`: cold (REFER, the caller's phone calls the target) or warm (we call the target,
    brief them, then bridge)."""
    if mode == "warm":
        if warm is None:
            raise TransferError("warm transfers are not available on this server")
        return warm.start(session, wanted)
    if mode != "cold":
        raise TransferError(f"unknown transfer mode {mode!r} (cold or warm)")
    return await transfers.start(session, wanted, tell_caller_if_refused=tell_caller_if_refused)


def register_transfer_tool(registry: ToolRegistry, transfers: CallTransfers, warm: WarmStarter | None = None,
                           default_mode: TransferMode = "cold") -> None:
    """`transfer_call`: offered on SIP calls only, with the allow-list's names as the only choices; with
    warm transfers available, the model may choose the mode (the configured default otherwise)."""

    async def transfer_call(arguments: dict[str, Any], context: ToolContext) -> str:
        session = context.call
        if not isinstance(session, Session):
            raise ToolError("this call cannot be transferred")
        mode = str(arguments.get("mode") or default_mode)
        try:
            state = await start_transfer(transfers, warm, session, str(arguments.get("target") or ""), mode,
                                         tell_caller_if_refused=False)
        except TransferError as exc:
            raise ToolError(exc.message) from None
        if state.mode == "warm":
            note = (f"You are calling {state.target} to brief them; the caller will hear a hold message, then "
                    f"be connected. Tell them in a few words that you are connecting them to {state.target}.")
        else:
            note = (f"The caller's phone is now calling {state.target}. Tell them in a few words that you are "
                    "putting them through. If it fails they will stay with you.")
        return json.dumps({"ok": True, "target": state.target, "mode": state.mode, "note": note})

    properties: dict[str, Any] = {"target": {"type": "string", "enum": transfers.names,
                                             "description": "who to put the caller through to"}}
    if warm is not None:
        properties["mode"] = {"type": "string", "enum": ["cold", "warm"],
                              "description": "warm: you brief the person first, then connect the caller; "
                                             f"cold: the caller's phone calls them directly (default {default_mode})"}

    registry.register(
        "transfer_call",
        "Transfer the caller to a person or department. Use only when the caller asks to be put through to "
        f"one of these: {', '.join(transfers.names)}.",
        {"type": "object", "properties": properties, "required": ["target"], "additionalProperties": False},
        transfer_call,
        available=_is_sip_call,
        ledger=False,  # the transfer records itself, with its outcome (CallTransfers.start and _finish)
    )
