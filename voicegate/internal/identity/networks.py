"""Is this address one of ours? CIDR allow-lists for trusted SIP peers and trusted header sources."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def address_in(host: str | None, cidrs: Iterable[str]) -> bool:
    """Whether `host` (an IP address; IPv4-mapped IPv6 counts as IPv4) lies in one of `cidrs`."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for cidr in cidrs:
        try:
            if address in ipaddress.ip_network(cidr, strict=False):
                return True
        except ValueError:
            continue
    return False
