"""Cutting a TCP byte stream into SIP messages (RFC 3261 18.3, RFC 5626 3.5.1 keep-alives).

A stream has no datagram boundaries, so Content-Length is the only thing that says where a message
ends; a peer that lies about it, or never ends its headers, must not make us buffer without limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONTENT_LENGTH_RE = re.compile(rb"^(?:content-length|l)[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r?$", re.I | re.M)


class FramingError(Exception):
    """The stream cannot be framed any further; the connection should be answered (if possible) and closed."""

    def __init__(self, reason: str, head: bytes = b"", too_large: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.head = head  # the header section, when we have one, to address a 400/513
        self.too_large = too_large


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """A CRLFCRLF ping; RFC 5626 asks for a single CRLF back."""


class StreamFramer:
    def __init__(self, max_message_bytes: int) -> None:
        self._max = max_message_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes | KeepAlive]:
        """Every complete message (or keep-alive) the stream now holds, in order."""
        self._buffer.extend(data)
        out: list[bytes | KeepAlive] = []
        while True:
            item = self._next()
            if item is None:
                return out
            out.append(item)

    def _next(self) -> bytes | KeepAlive | None:
        buffer = self._buffer
        while buffer.startswith(b"\r\n"):
            if buffer.startswith(b"\r\n\r\n"):
                del buffer[:4]
                return KeepAlive()
            if len(buffer) < 4 and b"\r\n\r\n".startswith(bytes(buffer)):
                return None  # maybe the start of a ping: wait for the rest
            del buffer[:2]  # a stray CRLF between messages (RFC 3261 7.5)
        candidates = [(i, n) for i, n in ((buffer.find(b"\r\n\r\n"), 4), (buffer.find(b"\n\n"), 2)) if i >= 0]
        if not candidates:
            if len(buffer) > self._max:
                raise FramingError("headers too large", too_large=True)
            return None
        index, sep = min(candidates)
        head = bytes(buffer[:index])
        lengths = {m.group(1) for m in _CONTENT_LENGTH_RE.finditer(head)}
        if len(lengths) > 1:
            raise FramingError("conflicting Content-Length", head)
        length_text = lengths.pop() if lengths else b"0"  # 18.3: required on streams; absent means none
        if not length_text.isdigit() or len(length_text) > 10:
            raise FramingError("bad Content-Length", head)
        total = index + sep + int(length_text)
        if total > self._max:
            raise FramingError("message too large", head, too_large=True)
        if len(buffer) < total:
            return None
        message = bytes(buffer[:total])
        del buffer[:total]
        return message
