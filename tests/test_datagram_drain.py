"""drain_datagram_reads: a UDP socket with packets waiting is read out in one wake of the loop, on real
sockets and asyncio's own datagram transport (what aioice, and so WebRTC media, reads through)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from voicegate.internal.peer.datagrams import MAX_PER_WAKE, drain_datagram_reads, installed


class Counting(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.received.append(data)


@pytest.fixture
def draining() -> Iterator[None]:
    was = installed()  # a server built earlier in this process installed it: leave it as it was found
    assert drain_datagram_reads()
    yield
    drain_datagram_reads(was)


@pytest.fixture
def plain() -> Iterator[None]:
    was = installed()
    drain_datagram_reads(False)
    yield
    drain_datagram_reads(was)


async def received_per_wake(count: int) -> list[int]:
    """Send `count` datagrams while the loop is not reading, then how many each loop iteration took."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(Counting, local_addr=("127.0.0.1", 0))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for index in range(count):
            sender.sendto(index.to_bytes(4, "big"), transport.get_extra_info("sockname"))
        seen, per_wake = 0, []
        for _ in range(4 * count):
            await asyncio.sleep(0)
            if len(protocol.received) > seen:
                per_wake.append(len(protocol.received) - seen)
                seen = len(protocol.received)
            if seen == count:
                break
        assert protocol.received == [index.to_bytes(4, "big") for index in range(count)]  # all, in order
        return per_wake
    finally:
        sender.close()
        transport.close()


async def test_waiting_datagrams_are_read_in_one_wake(draining: None) -> None:
    assert installed()
    assert await received_per_wake(40) == [40]


async def test_a_flooded_socket_yields_to_the_loop_after_a_bounded_batch(draining: None) -> None:
    per_wake = await received_per_wake(MAX_PER_WAKE + 10)
    assert per_wake[0] == MAX_PER_WAKE and sum(per_wake) == MAX_PER_WAKE + 10


async def test_without_it_asyncio_reads_one_datagram_per_wake(plain: None) -> None:
    assert not installed()
    per_wake = await received_per_wake(10)
    assert max(per_wake) == 1 and len(per_wake) == 10
