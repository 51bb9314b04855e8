"""Two real RtpSessions speaking SRTP to each other, and a raw socket playing an attacker without the key."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import cast

import numpy as np
import pytest

from tests.audio import test_rtp_session as plain
from tests.audio.test_rtp_session import Peer, Sessions, best_correlation, chirp_frames, wait_for
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.audio.rtp import rtp_header
from voicegate.internal.audio.rtp_session import RtpSession
from voicegate.internal.audio.srtp import SrtpContext
from voicegate.internal.sip.sdes import SrtpKeys, new_key
from voicegate.internal.sip.voice.call import SipVoiceCall, secure

# The RTP session tests' fixtures, under their own names so pytest finds them here too.
allocator, scheduler, sessions, raw_peer = plain.allocator, plain.scheduler, plain.sessions, plain.raw_peer

SUITE = "AES_CM_128_HMAC_SHA1_80"


def keys() -> tuple[SrtpContext, SrtpContext]:
    one, two = new_key(), new_key()
    return SrtpContext(SUITE, one, two), SrtpContext(SUITE, two, one)


async def test_srtp_audio_sent_by_one_session_is_heard_by_the_other(sessions: Sessions) -> None:
    talker, listener = Peer(outgoing=chirp_frames()), Peer()
    a = sessions.open(talker)
    b = sessions.open(listener, jitter_ms=100)
    a_keys, b_keys = keys()
    a.secure(a_keys)
    b.secure(b_keys)
    a.start(("127.0.0.1", b.local_port))
    b.start(("127.0.0.1", a.local_port))
    await wait_for(lambda: not talker.outgoing and len(listener.received) >= 75)
    heard = np.frombuffer(b"".join(listener.received), dtype="<i2").astype(np.float64)
    sent = np.frombuffer(ulaw_decode(ulaw_encode(b"".join(chirp_frames()))), dtype="<i2").astype(np.float64)
    scores = [best_correlation(heard, sent[i : i + 800]) for i in range(0, sent.size, 800)]
    assert sorted(scores)[len(scores) // 2] > 0.99
    assert b.stats().srtp_rejected == 0 and b.stats().malformed == 0


async def test_what_goes_on_the_wire_is_srtp(sessions: Sessions, raw_peer: socket.socket) -> None:
    session = sessions.open(Peer(outgoing=chirp_frames(0.2)), symmetric=False)
    ours, theirs = keys()
    session.secure(ours)
    session.start(raw_peer.getsockname())
    received: list[bytes] = []

    def arrived() -> bool:
        try:
            received.append(raw_peer.recvfrom(2048)[0])
        except BlockingIOError:
            pass
        return bool(received)

    await wait_for(arrived)
    packet = received[0]
    assert len(packet) == 12 + 160 + 10  # RTP header, 20 ms of G.711, 80-bit authentication tag
    clear = theirs.unprotect(packet)
    assert clear is not None and len(clear) == 172 and clear[12:] != packet[12:172]


async def test_packets_without_the_key_are_dropped_counted_and_never_latch(
    sessions: Sessions, raw_peer: socket.socket
) -> None:
    peer = Peer()
    session = sessions.open(peer, symmetric=True)
    session.secure(keys()[0])
    session.start(None)  # symmetric RTP waits for the first packet to learn where to send
    target = ("127.0.0.1", session.local_port)
    for seq in range(5):
        raw_peer.sendto(rtp_header(0, seq, 160 * seq, 0x1234) + b"\xff" * 160, target)  # plain RTP
    forged = SrtpContext(SUITE, new_key(), new_key()).protect(rtp_header(0, 9, 1440, 0x1234) + b"\xff" * 160)
    raw_peer.sendto(forged, target)  # SRTP, with a key nobody gave it
    await wait_for(lambda: session.stats().srtp_rejected >= 6)
    stats = session.stats()
    assert stats.packets_received == 0 and peer.received == []
    try:
        raw_peer.recvfrom(2048)
        raise AssertionError("the session answered a packet that failed authentication")
    except BlockingIOError:
        pass  # nothing came back: the forged packets did not move the symmetric-RTP latch


async def test_rtcp_reports_are_exchanged_as_srtcp(sessions: Sessions) -> None:
    a = sessions.open(Peer(), rtcp_interval_s=0.2)
    b = sessions.open(Peer(), rtcp_interval_s=0.2)
    a_keys, b_keys = keys()
    a.secure(a_keys)
    b.secure(b_keys)
    a.start(("127.0.0.1", b.local_port))
    b.start(("127.0.0.1", a.local_port))
    # A round-trip time needs the peer's report about our SR: both directions decrypted.
    await wait_for(lambda: a.stats().round_trip_ms is not None and b.stats().round_trip_ms is not None)
    assert a.stats().srtp_rejected == 0 and b.stats().srtp_rejected == 0


def keystream(clear: bytes, protected: bytes, start: int) -> bytes:
    """What AES counter mode XORed onto the packet from byte `start` on (its encrypted part)."""
    return bytes(a ^ b for a, b in zip(clear[start:], protected[start:len(clear)], strict=True))


async def test_a_re_invite_with_a_new_peer_key_never_reuses_our_keystream(
        sessions: Sessions, monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer re-keys (a re-INVITE with a new a=crypto, ours kept): every packet we protect, RTP and
    SRTCP, before and after, has a keystream of its own, and the peer, who still holds our key, accepts
    them all (a restarted SRTCP index would be refused by its replay window)."""
    sent: list[tuple[str, bytes, bytes]] = []
    protect, protect_rtcp = SrtpContext.protect, SrtpContext.protect_rtcp

    def recording(kind: str, method: Callable[[SrtpContext, bytes], bytes]) -> Callable[[SrtpContext, bytes], bytes]:
        def wrapped(self: SrtpContext, packet: bytes) -> bytes:
            out = method(self, packet)
            if all(self is not context for context in theirs):
                sent.append((kind, packet, out))
            return out
        return wrapped

    monkeypatch.setattr(SrtpContext, "protect", recording("rtp", protect))
    monkeypatch.setattr(SrtpContext, "protect_rtcp", recording("rtcp", protect_rtcp))
    ours, first, second = new_key(), new_key(), new_key()
    theirs = [SrtpContext(SUITE, first, ours), SrtpContext(SUITE, second, ours)]  # the peer's, not recorded
    session = sessions.open(Peer(outgoing=chirp_frames(3.0)), rtcp_interval_s=0.1)
    peer = sessions.open(Peer(), rtcp_interval_s=0.1)
    voice = SipVoiceCall("call-1", session)
    secure(voice, SrtpKeys(SUITE, ours, first))
    peer.secure(theirs[0])
    session.start(("127.0.0.1", peer.local_port))
    peer.start(("127.0.0.1", session.local_port))
    await wait_for(lambda: sum(kind == "rtcp" for kind, _, _ in sent) >= 3)
    before = len(sent)
    # The re-INVITE: the peer's new key, ours unchanged (negotiate_media keeps our local key).
    secure(voice, SrtpKeys(SUITE, ours, second))
    peer.secure(theirs[1])
    await wait_for(lambda: sum(kind == "rtcp" for kind, _, _ in sent[before:]) >= 3)
    streams = [keystream(clear, out, 12 if kind == "rtp" else 8) for kind, clear, out in sent]
    assert len(set(streams)) == len(streams), "two packets were encrypted with the same keystream"
    assert peer.stats().srtp_rejected == 0, "the peer refused packets we protected after the re-key"
    assert voice.srtp_keys == SrtpKeys(SUITE, ours, second)  # our key stays what the peer knows


def test_a_new_suite_under_our_old_key_gets_a_new_key_of_ours() -> None:
    """Both suites are AES-128 counter mode: the same master key under the other suite would repeat the
    keystream of every index already used, so our key changes with the suite (the answer carries it)."""
    voice = SipVoiceCall("call-2", cast(RtpSession, _NoMedia()))
    ours = new_key()
    secure(voice, SrtpKeys(SUITE, ours, new_key()))
    changed = secure(voice, SrtpKeys("AES_CM_128_HMAC_SHA1_32", ours, new_key()))
    assert changed is not None and changed.local != ours and voice.srtp_keys == changed
    assert voice.srtp is not None and voice.srtp.local_key == changed.local


class _NoMedia:
    def secure(self, context: SrtpContext | None) -> None:
        self.context = context
