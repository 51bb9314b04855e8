"""SIP over TLS (RFC 3261 section 26.2, RFC 5630): where we listen and the two TLS contexts.

TLS reuses the TCP connection code of transport.py unchanged (same stream framing, same
connection reuse); only the sockets are wrapped. The server side presents `sip.tls_cert` and does
not ask callers for certificates (phones rarely have one; digest auth or trusted peers say who may
call). When WE connect out, the peer's certificate must chain to `sip.tls_ca` (or the system's CAs
when unset) and name the host of the URI we dial, as RFC 5922 asks: an IP address in the URI is
checked against the certificate's IP subjectAltNames.
"""

from __future__ import annotations

import re
import ssl

from voicegate.internal.config.sections import SipConfig, split_host_port

DEFAULT_TLS_PORT = 5061  # RFC 3261 19.1.2: the default port for sips: and transport=tls


def tls_listen_address(config: SipConfig, bind: tuple[str, int]) -> tuple[str, int]:
    """`sip.tls_bind`, else the host of `bind` on port 5061, or on a free port when `bind`'s port is
    0 (tests, or `voicegate call` next to a running server): UDP/TCP and TLS cannot share one port
    number usefully, since TLS peers expect 5061 and plain ones 5060."""
    if config.tls_bind:
        return split_host_port(config.tls_bind, DEFAULT_TLS_PORT)
    host, port = bind
    return host, 0 if port == 0 else DEFAULT_TLS_PORT


def server_context(config: SipConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls_cert, config.tls_key)
    context.verify_mode = ssl.CERT_NONE
    return context


def client_context(config: SipConfig) -> ssl.SSLContext:
    """Verifying context for connections we open; our certificate goes along for peers that want one."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.tls_ca or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.tls_cert and config.tls_key:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


def default_port(transport: str) -> int:
    return DEFAULT_TLS_PORT if transport == "tls" else 5060


def transport_failure(exc: BaseException) -> str:
    """Why a request could not be sent, short enough for a reason phrase and /health: the TLS check
    that failed ("CERTIFICATE_VERIFY_FAILED: ..."), the socket error ("Connection refused"), or the
    error's kind. One line of printable ASCII, at most 120 characters."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = f"{exc.reason}: {exc.verify_message}"
    elif isinstance(exc, ssl.SSLError):
        detail = str(exc.reason or exc)
    elif isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    else:
        detail = type(exc).__name__
    return re.sub(r"\s+", " ", re.sub(r"[^\x20-\x7e]", " ", detail)).strip()[:120] or type(exc).__name__

