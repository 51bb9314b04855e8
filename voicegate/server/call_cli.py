"""`voicegate call sip:user@host`: phone someone from the command line and let the agent talk.

Starts the server's components in this process (SIP on `sip.bind`, the configured STT/LLM/TTS and
memory), places one call, prints its progress and transcript, and exits when the call ends:
0 when it was answered and ended normally, 1 when it failed (the SIP status is printed; with --goal, also
when the phone menu led to a dead end, whose reason is printed), 2 for a
target that is not a SIP URI, 130 when interrupted (the call is hung up first).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from voicegate.internal.config import Config, ConfigError
from voicegate.internal.conversation.transcript import TranscriptEntry
from voicegate.internal.session import Session
from voicegate.server.cli_logging import configure_tool_logging

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# Ends that mean the call did not work, as opposed to someone hanging up (see SessionManager.end reasons).
FAILED_ENDINGS = frozenset({"rtp timeout", "sip error", "sip ack timeout"})
POLL_S = 0.1


def run_call(args: argparse.Namespace, config: Config) -> int:
    from voicegate.server.providers import check_providers

    try:
        check_providers(config)
    except ConfigError as exc:
        print("voicegate call: " + "; ".join(exc.problems), file=sys.stderr)
        return EXIT_FAILED
    if args.timeout is not None:
        if args.timeout <= 0:
            print("voicegate call: --timeout must be positive", file=sys.stderr)
            return EXIT_USAGE
        config.sip.outbound.timeout_s = args.timeout
    config.sip.enabled = True  # this command is a SIP call, whatever `serve` is configured to do
    # One outbound call needs no binding at a PBX, and un-registering on exit would remove the one
    # `serve` holds when both use the same sip.bind address.
    config.sip.registrations = []
    configure_tool_logging(config)
    try:
        amd = args.amd if args.amd is not None else config.amd.enabled
        return asyncio.run(place_and_follow(config, args.target, args.greeting, sys.stdout, amd=amd,
                                            voicemail_message=args.voicemail_message, goal=args.goal))
    except KeyboardInterrupt:
        print("interrupted: the call was hung up", file=sys.stderr)
        return EXIT_INTERRUPTED


async def place_and_follow(config: Config, target: str, greeting: str | None, out: TextIO, *, amd: bool = False,
                           voicemail_message: str | None = None, goal: str | None = None) -> int:
    """Place the call and print what happens until it ends; returns the exit code."""
    from voicegate.internal.sip.handler import CallFailed
    from voicegate.internal.telephony.answering_machine import AMD, plan_from_config
    from voicegate.internal.telephony.menu_model import menu_completion
    from voicegate.internal.telephony.navigation import menu_plan
    from voicegate.server.gateway import Gateway

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    gateway = Gateway(config)
    try:
        await gateway.start()
    except OSError as exc:
        say(f"cannot listen for SIP on {config.sip.bind}: {exc.strerror or exc}. Is `voicegate serve` using it? "
            "Choose another address with VOICEGATE_SIP__BIND (port 0 picks a free one).")
        return EXIT_FAILED
    try:
        assert gateway.sessions is not None and gateway.sip_calls is not None
        ended = asyncio.Event()
        placed: list[Session] = []

        async def on_end(session: Session) -> None:
            if placed and session is placed[0]:
                ended.set()

        gateway.sessions.add_end_hook(on_end)
        local = gateway.sip.local_address()
        say(f"dialling {target} from {local.host}:{local.port} ...")
        plan = plan_from_config(config.amd, voicemail_message=voicemail_message) if amd else None
        menu = menu_plan(config.menus, goal, model=menu_completion(config)) if goal else None
        try:
            session = await gateway.sip_calls.place_call(target, greeting=greeting, amd=plan, menu=menu)
        except ValueError as exc:
            say(f"not a SIP URI: {exc}")
            return EXIT_USAGE
        except CallFailed as failure:
            say(f"call failed: SIP {failure.status} {failure.reason}")
            return EXIT_FAILED
        placed.append(session)
        say(f"answered (session {session.id})")
        shown = 0
        told = plan is None or menu is not None  # with a goal, the walk tells a voicemail greeting from a menu
        walk = MenuProgress(session, say) if menu is not None else None
        while not (ended.is_set() or session.ended):
            if walk is not None:
                walk.show()
            shown = _show_new(session.conversation.transcript.entries(), shown, say)
            run = session.slots.get(AMD)
            if not told and run is not None and run.decision is not None:
                told = True
                decision = run.decision
                say(f"answering machine detection: {decision.result} ({decision.reason}, "
                    f"{decision.at_ms / 1000:.1f} s) -> {run.outcome}")
            try:
                await asyncio.wait_for(ended.wait(), POLL_S)
            except TimeoutError:
                pass
        if walk is not None:
            walk.show()
        _show_new(session.conversation.transcript.entries(), shown, say)
        say(f"ended: {session.end_reason}")
        if walk is not None and walk.failed:
            return EXIT_FAILED
        return EXIT_FAILED if session.end_reason in FAILED_ENDINGS else EXIT_OK
    finally:
        await gateway.stop()  # hangs up a call still running (Ctrl-C) with a BYE


class MenuProgress:
    """Prints the phone menu walk as it goes: each choice, then the person reached or the dead end."""

    def __init__(self, session: Session, say: Any) -> None:
        self._session = session
        self._say = say
        self._shown = 0
        self._ended = False
        self.failed = False

    def show(self) -> None:
        from voicegate.internal.telephony.navigation import MENU

        run = self._session.slots.get(MENU)
        if run is None:
            return
        for step in run.path[self._shown:]:
            self._say(f"menu: {step}")
        self._shown = len(run.path)
        if run.done.is_set() and not self._ended:
            self._ended = True
            self.failed = run.result != "reached"
            self._say(f"menu: {run.result} ({run.reason})")


def _show_new(entries: list[TranscriptEntry], shown: int, say: Any) -> int:
    for entry in entries[shown:]:
        who = "agent" if entry.role == "agent" else "callee"
        say(f"  {who}: {entry.text}" + (" [interrupted]" if entry.interrupted else ""))
    return len(entries)
