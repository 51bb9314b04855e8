"""The start-up banner of `voicegate serve`: where to point a browser, what to dial, what runs, what to try.

`render_banner` is a pure function of `BannerInfo`, so its wording is tested without a server;
`gather_banner_info` reads the running gateway (the engines /health reports, the ports SIP really bound)
once the server listens.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from voicegate.internal.config import Config
from voicegate.internal.config.sections import split_host_port

log = logging.getLogger(__name__)

ANY_HOSTS = ("0.0.0.0", "::", "")
# The UAS answers any user part; `agent` reads as what it is for a person typing it into a softphone.
SIP_USER = "agent"


@dataclass(frozen=True)
class BannerInfo:
    page_urls: list[str]  # this machine first, then the LAN address
    sip_uris: list[str] = field(default_factory=list)  # empty: SIP is off
    local_sip_uri: str = ""  # for a softphone on this machine, when SIP listens on loopback too
    engines: dict[str, str] = field(default_factory=dict)  # label -> engine, in display order
    memory: str = "off"
    offline_agent: bool = False  # the built-in local agent answers (no language model configured)
    command: str = "voicegate"  # how to run another command with the same config


def lan_address() -> str | None:
    """This machine's address on its network (the interface of the default route), if it has one."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; this only picks the outbound interface
        address = str(probe.getsockname()[0])
        return None if address.startswith("127.") or address == "0.0.0.0" else address
    return None


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def page_urls(config: Config, port: int, lan: str | None) -> list[str]:
    host = config.server.host
    urls = [f"http://127.0.0.1:{port}/"] if host in ANY_HOSTS else [f"http://{_host(host)}:{port}/"]
    if host in ANY_HOSTS and lan:
        urls.append(f"http://{lan}:{port}/")
    if config.server.public_url:
        urls.append(config.server.public_url)
    return urls


def sip_uris(config: Config, ports: dict[str, int], lan: str | None) -> tuple[list[str], str]:
    """The URIs to dial, one per transport, and the loopback one for a softphone on this machine."""
    bind_host = config.sip.bind_host
    if config.sip.public_address:
        host, _ = split_host_port(config.sip.public_address, 5060)
    elif bind_host in ANY_HOSTS:
        host = lan or "127.0.0.1"
    else:
        host = bind_host
    uris = [_uri(_host(host), transport, port) for transport, port in ports.items()]
    local = ""
    if bind_host in (*ANY_HOSTS, "127.0.0.1") and "udp" in ports:
        local = _uri("127.0.0.1", "udp", ports["udp"])
    elif bind_host in (*ANY_HOSTS, "127.0.0.1") and ports:
        first = next(iter(ports))
        local = _uri("127.0.0.1", first, ports[first])
    return uris, ("" if local in uris else local)  # bound to loopback: the URIs already are the local ones


def _uri(host: str, transport: str, port: int) -> str:
    if transport == "tls":
        return f"sips:{SIP_USER}@{host}:{port}"
    suffix = "" if transport == "udp" else f";transport={transport}"
    return f"sip:{SIP_USER}@{host}:{port}{suffix}"


def memory_description(config: Config) -> str:
    if not config.memory.enabled:
        return "off (memory.enabled = false)"
    provider = config.memory.provider
    if provider == "memory":
        return "on, in this process only (forgotten when the server stops)"
    if provider == "markdown":
        directory = Path(config.memory.markdown_dir) if config.memory.markdown_dir else config.data_dir / "memory"
        return f"on, Markdown files in {directory}"
    if not config.pgvector.connection_string:
        return f"on, embedded PostgreSQL in {config.data_dir / 'postgres'}"
    return f"on, PostgreSQL at {database_location(config.pgvector.connection_string)}"


def database_location(url: str) -> str:
    """host:port/database of a connection string: never the user's password, nor the query's options."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(the configured pgvector.connection_string)"
    return f"{_host(host)}{port}{parts.path or ''}"


async def gather_banner_info(config: Config, gateway: Any, http_port: int, config_path: Path | None) -> BannerInfo:
    lan = lan_address()
    uris: list[str] = []
    local = ""
    if config.sip.enabled and gateway.sip is not None:
        ports: dict[str, int] = {str(transport): int(gateway.sip.local_address(transport).port)
                                 for transport in config.sip.transports}
        uris, local = sip_uris(config, ports, lan)
    try:
        components = (await gateway.health())["components"]
    except Exception:  # a banner must not take a listening server down; fall back to what the config says
        log.warning("the banner could not read the engines from /health", exc_info=True)
        components = {}
    stt = components.get("stt", {})
    engines = {"Speech-to-text": " ".join(str(stt[k]) for k in ("engine", "device", "compute_type") if k in stt)
               or config.stt.provider,  # e.g. "whisper cpu int8"
               "Text-to-speech": str(components.get("tts", {}).get("engine", config.tts.provider)),
               "Language model": config.effective_llm_provider}
    turn = components.get("turn_taking")
    if turn:
        engines["Turn taking"] = f"VAD {turn.get('vad')}, end of turn {turn.get('end_of_turn')}"
    command = f"voicegate --config {config_path}" if config_path else "voicegate"
    return BannerInfo(page_urls(config, http_port, lan), uris, local, engines, memory_description(config),
                      offline_agent=config.effective_llm_provider == "local", command=command)


def render_banner(info: BannerInfo) -> str:
    lines = ["voicegate is ready.", "", f"  Browser page   {info.page_urls[0]}"]
    lines += [f"                 {url}" for url in info.page_urls[1:]]
    if len(info.page_urls) > 1:
        lines.append("                 (a browser allows the microphone only on localhost or over https)")
    if info.sip_uris:
        lines.append(f"  SIP, dial      {info.sip_uris[0]}")
        lines += [f"                 {uri}" for uri in info.sip_uris[1:]]
        if info.local_sip_uri:
            lines.append(f"                 from a softphone on this machine: {info.local_sip_uri}")
    else:
        lines.append("  SIP            off (sip.enabled = false)")
    for label, engine in info.engines.items():
        lines.append(f"  {label:<14} {engine}")
    lines.append(f"  Memory         {info.memory}")
    lines += ["", "Three things to try:"]
    question = '"what time is it?"' if info.offline_agent else "anything"
    lines.append(f"  1. Open {info.page_urls[0]}, press Call and ask {question}.")
    if info.offline_agent:
        lines.append('     The offline agent tells the time and date, repeats "say ...", ends the call on "goodbye"')
        lines.append('     and, with memory on, remembers "my name is ..." for the next call.')
    if info.sip_uris:
        target = info.local_sip_uri or info.sip_uris[0]
        lines.append(f"  2. Dial {target} from a softphone, or place a test call: "
                     f"sipp -sn uac -m 1 {target.split('@', 1)[1].split(';', 1)[0]}")
    else:
        lines.append(f"  2. Check the effective configuration: {info.command} config check")
    lines.append(f"  3. Talk through the microphone without a browser: {info.command} talk --mic")
    lines += ["", "Ctrl-C stops."]
    return "\n".join(lines) + "\n"
