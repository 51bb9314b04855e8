"""ICE settings for every peer connection: which host addresses we offer, and STUN/TURN servers.

aioice gathers host candidates from every interface except loopback, and RTCConfiguration has no
setting to change that. `webrtc.ice_hosts` therefore replaces aioice's address lookup
(`aioice.ice.get_host_addresses`). That function is module-level, so the override is process-wide:
it is installed once, at startup, from the config, and applies to every connection in the process
(including a test's own aiortc client, which is why tests on a machine with only loopback work).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

from voicegate.internal.config.sections import IceServer

log = logging.getLogger(__name__)

HostLookup = Callable[[bool, bool], list[str]]

_AIOICE_DEFAULT: HostLookup = aioice.ice.get_host_addresses


def parse_ice_hosts(hosts: Sequence[str]) -> list[str]:
    """The IP literals among `hosts` (a hostname cannot be a host candidate), in order, deduplicated."""
    addresses: list[str] = []
    for host in hosts:
        try:
            address = str(ipaddress.ip_address(host.strip().strip("[]")))
        except ValueError:
            log.warning("webrtc.ice_hosts: %r is not an IP address; ignored", host)
            continue
        if address not in addresses:
            addresses.append(address)
    return addresses


def fixed_host_lookup(addresses: Sequence[str]) -> HostLookup:
    fixed = list(addresses)

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [a for a in fixed if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]

    return get_host_addresses


def configure_ice_hosts(hosts: Sequence[str]) -> list[str]:
    """Offer exactly `hosts` as ICE host candidates (empty: aioice's default). Process-wide; see above."""
    addresses = parse_ice_hosts(hosts)
    aioice.ice.get_host_addresses = fixed_host_lookup(addresses) if addresses else _AIOICE_DEFAULT  # type: ignore[assignment]
    if addresses:
        log.info("ICE host candidates fixed by webrtc.ice_hosts", extra={"ice_hosts": addresses})
    return addresses


def rtc_configuration(servers: Sequence[IceServer]) -> RTCConfiguration:
    """STUN/TURN from `webrtc.ice_servers`. None configured means none used: aiortc would otherwise
    query Google's public STUN server, which an offline or private deployment must not depend on."""
    ice_servers = [
        RTCIceServer(urls=list(server.urls), username=server.username or None, credential=server.credential or None)
        for server in servers
    ]
    return RTCConfiguration(iceServers=ice_servers)
