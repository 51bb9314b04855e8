"""Reading the RTP captures that ship with sipp (classic libpcap, Ethernet/IPv4/UDP), with struct only."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

SIPP_PCAPS = Path("/usr/share/sip-tester")
# Not a skip: `make test` installs sip-tester, so missing captures are a broken set-up.
needs_sipp_pcaps = pytest.mark.usefixtures("sipp_pcaps_installed")


@pytest.fixture
def sipp_pcaps_installed() -> None:
    assert SIPP_PCAPS.is_dir(), f"sip-tester's pcap files are not in {SIPP_PCAPS} (apt: sip-tester)"


def read_pcap_udp_payloads(path: Path) -> list[bytes]:
    """UDP payloads of a classic libpcap capture of Ethernet/IPv4 frames."""
    data = path.read_bytes()
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">"}[magic]
    (linktype,) = struct.unpack_from(endian + "I", data, 20)
    assert linktype == 1, "only Ethernet captures are handled"
    payloads = []
    offset = 24
    while offset + 16 <= len(data):
        _sec, _usec, captured, _original = struct.unpack_from(endian + "IIII", data, offset)
        frame = data[offset + 16 : offset + 16 + captured]
        offset += 16 + captured
        if struct.unpack_from("!H", frame, 12)[0] != 0x0800:
            continue
        ip = frame[14:]
        header_len = (ip[0] & 0x0F) * 4
        total_len = struct.unpack_from("!H", ip, 2)[0]
        if ip[9] != 17:
            continue
        udp = ip[header_len:total_len]
        udp_len = struct.unpack_from("!H", udp, 4)[0]
        payloads.append(bytes(udp[8:udp_len]))
    return payloads
