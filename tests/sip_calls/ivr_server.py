"""A company's phone menu for the tests and the bench: a SIP UAS on the product's own SIP stack.

It answers, speaks the menu prompts (any renderer: Piper, espeak-ng), takes keys as RFC 4733 events (when
its SDP answer accepts telephone-event) or as SIP INFO (when it does not: the caller must fall back),
walks a tree of `MenuNode`s (menus, hold with synthesised music, a person who answers, a closed line),
repeats a menu nobody chose in, says "that is not a valid option" to a wrong key, and logs what happened
(`log`: "node billing", "key 1 rfc4733", ...). What the caller says after the person answered is kept
(`heard`) for the test's ear.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from voicegate.internal.audio.rtp_ports import RtpPortAllocator
from voicegate.internal.audio.rtp_session import RtpSession
from voicegate.internal.audio.scheduler import PacedScheduler
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.handler import IncomingCall, Rejection
from voicegate.internal.sip.sdp import SessionDescription, build_answer, negotiate
from voicegate.internal.sip.ua import UserAgent

RATE = 8000
FRAME_BYTES = RATE // 50 * 2
KeyMethod = Literal["rfc4733", "info"]
NodeKind = Literal["menu", "hold", "person", "closed"]
INVALID = "That is not a valid option."
NO_CHOICE = "We did not receive a valid selection. Goodbye."


@dataclass(frozen=True)
class MenuNode:
    say: str
    kind: NodeKind = "menu"
    keys: dict[str, str] = field(default_factory=dict)  # key -> next node
    hold_s: float = 0.0  # hold: music this long, then `then`
    then: str = ""


@dataclass(frozen=True)
class MenuTree:
    nodes: dict[str, MenuNode]
    start: str = "main"
    repeats: int = 2  # a menu is said this many more times when no key comes
    wait_s: float = 10.0  # after a prompt, how long it waits for a key
    person_listens_s: float = 10.0  # the person hangs up after listening this long


def hold_music(seconds: float, seed: int = 1) -> bytes:
    """A little tune: two-note chords changing every 400 ms, quiet enough to be background."""
    rng = random.Random(seed)
    notes = [262.0, 294.0, 330.0, 349.0, 392.0, 440.0, 494.0, 523.0]
    parts = []
    for _ in range(max(1, int(seconds / 0.4))):
        t = np.arange(int(RATE * 0.4)) / RATE
        low, high = rng.choice(notes), rng.choice(notes) * 1.5
        ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.02)
        parts.append(3000 * ramp * (np.sin(2 * np.pi * low * t) + 0.6 * np.sin(2 * np.pi * high * t)))
    return np.concatenate(parts).astype(np.int16).tobytes()


class IvrServer:
    def __init__(self, tree: MenuTree, render: Callable[[str], bytes], *, keys: KeyMethod = "rfc4733",
                 host: str = "127.0.0.1") -> None:
        self.tree = tree
        self.keys_by = keys
        self.host = host
        self.log: list[str] = []
        self.heard = bytearray()
        self.ended = asyncio.Event()
        self._render = render
        self._speech: dict[str, bytes] = {}
        config = SipConfig(bind=f"{host}:5060", transports=["udp"], user_agent="test-ivr", invite_rate_per_min=0,
                           rtp_timeout_s=120.0)
        self.ua = UserAgent(config, _IvrHandler(self), bind=(host, 0))
        self.scheduler = PacedScheduler()
        low = random.randrange(30000, 59000) & ~1
        self.allocator = RtpPortAllocator(low, low + 99)
        self.rtp: RtpSession | None = None
        self.dialog: Dialog | None = None
        self._remote: tuple[str, int] | None = None
        self._out = b""
        self._played = asyncio.Event()
        self._keys: asyncio.Queue[str] = asyncio.Queue()
        self._listening = False
        self._script: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return self.ua.local_address().port

    @property
    def target(self) -> str:
        return f"sip:menu@{self.host}:{self.port}"

    async def start(self) -> None:
        texts = [node.say for node in self.tree.nodes.values()] + [INVALID, NO_CHOICE]
        rendered = await asyncio.to_thread(lambda: {text: self._render(text) for text in texts})
        self._speech.update(rendered)
        await self.ua.start()

    def _said(self, text: str) -> bytes:
        return self._speech[text]

    async def stop(self) -> None:
        if self._script is not None:
            self._script.cancel()
        await self.ua.shutdown(timeout_s=2.0)
        if self.rtp is not None:
            self.rtp.close()
        self.scheduler.close()

    # ---- media --------------------------------------------------------------------------------------

    def _frame(self) -> bytes | None:
        if not self._out:
            self._played.set()
            return None
        chunk, self._out = self._out[:FRAME_BYTES], self._out[FRAME_BYTES:]
        return chunk.ljust(FRAME_BYTES, b"\x00")

    def _hear(self, pcm: bytes) -> None:
        if self._listening:
            self.heard += pcm

    def key(self, digit: str, method: KeyMethod) -> None:
        self.log.append(f"key {digit} {method}")
        self._keys.put_nowait(digit)

    async def _play(self, pcm: bytes) -> None:
        self._played.clear()
        self._out = pcm
        await self._played.wait()

    async def _prompt_then_key(self, text: str) -> str | None:
        """Say `text` (a key cuts it short), then wait `wait_s` for a key."""
        self._played.clear()
        self._out = bytes(RATE // 5) + self._said(text)
        key_task = asyncio.ensure_future(self._keys.get())
        try:
            await asyncio.wait([key_task, asyncio.ensure_future(self._played.wait())],
                               return_when=asyncio.FIRST_COMPLETED)
            if not key_task.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(key_task), self.tree.wait_s)
            if key_task.done():
                self._out = b""  # barge-in: the menu stops talking at a key
                return key_task.result()
            return None
        finally:
            key_task.cancel()

    # ---- the call -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        name = self.tree.start
        while True:
            node = self.tree.nodes[name]
            self.log.append(f"node {name}")
            if node.kind == "closed":
                await self._play(self._said(node.say))
                await self._hang_up()
                return
            if node.kind == "person":
                await self._play(bytes(RATE // 2) + self._said(node.say))
                self._listening = True
                await asyncio.sleep(self.tree.person_listens_s)
                await self._hang_up()
                return
            if node.kind == "hold":
                await self._play(self._said(node.say) + hold_music(node.hold_s))
                name = node.then
                continue
            while not self._keys.empty():
                self._keys.get_nowait()
            chosen = await self._menu(node)
            if chosen is None:
                await self._play(self._said(NO_CHOICE))
                await self._hang_up()
                return
            name = chosen

    async def _menu(self, node: MenuNode) -> str | None:
        for _ in range(self.tree.repeats + 1):
            key = await self._prompt_then_key(node.say)
            if key is None:
                continue
            if key in node.keys:
                return node.keys[key]
            self.log.append(f"invalid {key}")
            await self._play(self._said(INVALID))
        return None

    async def _hang_up(self) -> None:
        if self.dialog is not None and not self.ended.is_set():
            self.log.append("hung up")
            await self.ua.hangup(self.dialog)


class _IvrHandler:
    def __init__(self, ivr: IvrServer) -> None:
        self._ivr = ivr

    def admit(self, call: IncomingCall) -> Rejection | None:
        return None if self._ivr.rtp is None else Rejection(486, "Busy Here")

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        ivr = self._ivr
        assert call.offer is not None
        negotiated = negotiate(call.offer, ("PCMU",))
        if ivr.keys_by == "info":  # no telephone-event in our answer: the caller's keys must come as INFO
            negotiated = replace(negotiated, dtmf_payload_type=None)
        ivr.rtp = RtpSession(local_host=ivr.host, allocator=ivr.allocator, scheduler=ivr.scheduler,
                             payload_type=negotiated.payload_type, dtmf_payload_type=negotiated.dtmf_payload_type,
                             symmetric=False, timeout_s=120.0, jitter_ms=40, source=ivr._frame, sink=ivr._hear,
                             on_dtmf=lambda digit: ivr.key(digit, "rfc4733"), on_timeout=lambda: None)
        ivr._remote = (negotiated.remote_host, negotiated.remote_port)
        ivr.dialog = dialog
        ivr.log.append("answered")
        return build_answer(negotiated, ivr.host, ivr.rtp.local_port, 1, offer=call.offer)

    async def confirmed(self, dialog: Dialog) -> None:
        ivr = self._ivr
        assert ivr.rtp is not None
        ivr.rtp.start(ivr._remote)
        ivr._script = asyncio.get_running_loop().create_task(ivr._run(), name="ivr-script")

    async def reinvite(self, dialog: Dialog, offer: SessionDescription | None) -> SessionDescription:
        assert dialog.local_sdp is not None
        return dialog.local_sdp

    def dtmf(self, dialog: Dialog, digit: str) -> None:
        self._ivr.key(digit, "info")

    async def ended(self, dialog: Dialog, reason: str) -> None:
        ivr = self._ivr
        ivr.log.append(f"ended {reason}")
        ivr.ended.set()
        if ivr._script is not None:
            ivr._script.cancel()
        if ivr.rtp is not None:
            ivr.rtp.close()
