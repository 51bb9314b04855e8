"""SDP (RFC 4566) and the offer/answer rules we need for G.711 telephony (RFC 3264, RFC 4733).

Parsing keeps every line it does not interpret, so `SessionDescription.parse(sdp.serialise())`
equals `sdp`. Negotiation is deliberately small: one audio stream, PCMU or PCMA, optional
telephone-event, and hold signalled by direction attributes or the old c=0.0.0.0 convention.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

Direction = str  # "sendrecv" | "sendonly" | "recvonly" | "inactive"
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
_REVERSE = {"sendrecv": "sendrecv", "sendonly": "recvonly", "recvonly": "sendonly", "inactive": "inactive"}
_STATIC_PAYLOAD_TYPES = {"PCMU": 0, "PCMA": 8}  # RFC 3551: usable without an rtpmap line
_SESSION_BEFORE_C = "iuep"
_HOLD_ADDRESSES = ("0.0.0.0", "::")


class SdpError(ValueError):
    """An SDP body we cannot read or cannot use; the UA answers 488."""


class NoCommonCodec(SdpError):
    """The offer has no audio codec we speak."""


@dataclass(slots=True)
class Origin:
    username: str = "-"
    session_id: str = "0"
    session_version: str = "0"
    nettype: str = "IN"
    addrtype: str = "IP4"
    address: str = "0.0.0.0"

    def __str__(self) -> str:
        parts = (self.username, self.session_id, self.session_version, self.nettype, self.addrtype, self.address)
        return " ".join(parts)


@dataclass(slots=True)
class Connection:
    nettype: str = "IN"
    addrtype: str = "IP4"
    address: str = "0.0.0.0"  # may carry /ttl for multicast

    @property
    def host(self) -> str:
        return self.address.split("/", 1)[0]

    def __str__(self) -> str:
        return f"{self.nettype} {self.addrtype} {self.address}"


@dataclass(slots=True)
class MediaDescription:
    kind: str  # "audio", "video", ...
    port: int
    proto: str
    formats: list[str]
    port_count: int | None = None
    connection: Connection | None = None
    bandwidths: list[str] = field(default_factory=list)  # "AS:64"
    attributes: list[tuple[str, str | None]] = field(default_factory=list)
    other: list[tuple[str, str]] = field(default_factory=list)  # i= and k= lines, kept as read

    def attribute(self, name: str) -> str | None:
        return next((value for key, value in self.attributes if key == name), None)

    def rtpmaps(self) -> dict[str, tuple[str, int]]:
        """payload type -> (encoding name, clock rate)."""
        maps: dict[str, tuple[str, int]] = {}
        for key, value in self.attributes:
            if key == "rtpmap" and value:
                pt, _, encoding = value.partition(" ")
                name, _, rest = encoding.strip().partition("/")
                clock = rest.split("/", 1)[0]
                if clock.isdigit():
                    maps[pt] = (name, int(clock))
        return maps

    def fmtp(self, payload_type: str) -> str | None:
        for key, value in self.attributes:
            if key == "fmtp" and value and value.split(" ", 1)[0] == payload_type:
                return value.partition(" ")[2].strip()
        return None

    @property
    def direction(self) -> Direction | None:
        return next((key for key, _ in self.attributes if key in DIRECTIONS), None)

    @property
    def ptime(self) -> int | None:
        value = self.attribute("ptime")
        try:
            return int(float(value)) if value else None
        except ValueError:
            return None

    def lines(self) -> list[str]:
        port = f"{self.port}/{self.port_count}" if self.port_count is not None else str(self.port)
        out = [f"m={self.kind} {port} {self.proto} {' '.join(self.formats)}".rstrip()]
        out += [f"i={v}" for k, v in self.other if k == "i"]
        if self.connection:
            out.append(f"c={self.connection}")
        out += [f"b={b}" for b in self.bandwidths]
        out += [f"{k}={v}" for k, v in self.other if k != "i"]
        out += [f"a={k}" if v is None else f"a={k}:{v}" for k, v in self.attributes]
        return out


@dataclass(slots=True)
class SessionDescription:
    origin: Origin = field(default_factory=Origin)
    name: str = "-"
    connection: Connection | None = None
    timing: list[str] = field(default_factory=lambda: ["0 0"])
    bandwidths: list[str] = field(default_factory=list)
    attributes: list[tuple[str, str | None]] = field(default_factory=list)
    media: list[MediaDescription] = field(default_factory=list)
    other: list[tuple[str, str]] = field(default_factory=list)  # i u e p r z k lines
    version: int = 0

    @property
    def direction(self) -> Direction | None:
        return next((key for key, _ in self.attributes if key in DIRECTIONS), None)

    @staticmethod
    def parse(data: bytes | str) -> SessionDescription:
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
        except UnicodeDecodeError as exc:
            raise SdpError("SDP is not UTF-8") from exc
        lines = [line.rstrip("\r") for line in text.split("\n")]
        lines = [line for line in lines if line.strip()]
        if not lines or lines[0].strip() != "v=0":
            raise SdpError("SDP must start with v=0")
        sdp = SessionDescription(timing=[])
        media: MediaDescription | None = None
        for line in lines[1:]:
            if len(line) < 2 or line[1] != "=" or not line[0].isalpha():
                raise SdpError("bad SDP line")
            kind, value = line[0], line[2:]
            if kind == "m":
                media = _parse_media(value)
                sdp.media.append(media)
            elif kind == "a":
                name, sep, attr_value = value.partition(":")
                target = media.attributes if media else sdp.attributes
                target.append((name, attr_value if sep else None))
            elif kind == "c":
                connection = _parse_connection(value)
                if media:
                    media.connection = connection
                else:
                    sdp.connection = connection
            elif kind == "b":
                (media.bandwidths if media else sdp.bandwidths).append(value)
            elif media is not None:
                media.other.append((kind, value))
            elif kind == "o":
                parts = value.split()
                if len(parts) != 6:
                    raise SdpError("bad o= line")
                sdp.origin = Origin(*parts)
            elif kind == "s":
                sdp.name = value
            elif kind == "t":
                sdp.timing.append(value)
            else:
                sdp.other.append((kind, value))
        return sdp

    def serialise(self) -> bytes:
        out = [f"v={self.version}", f"o={self.origin}", f"s={self.name}"]
        out += [f"{k}={v}" for k, v in self.other if k in _SESSION_BEFORE_C]
        if self.connection:
            out.append(f"c={self.connection}")
        out += [f"b={b}" for b in self.bandwidths]
        out += [f"t={t}" for t in self.timing]
        out += [f"{k}={v}" for k, v in self.other if k not in _SESSION_BEFORE_C]
        out += [f"a={k}" if v is None else f"a={k}:{v}" for k, v in self.attributes]
        for media in self.media:
            out += media.lines()
        return ("\r\n".join(out) + "\r\n").encode("utf-8")


def _parse_media(value: str) -> MediaDescription:
    parts = value.split()
    if len(parts) < 3:
        raise SdpError("bad m= line")
    port_text, _, count_text = parts[1].partition("/")
    if not port_text.isdigit() or int(port_text) > 65535 or (count_text and not count_text.isdigit()):
        raise SdpError("bad m= port")
    return MediaDescription(parts[0], int(port_text), parts[2], parts[3:], int(count_text) if count_text else None)


def _parse_connection(value: str) -> Connection:
    parts = value.split()
    if len(parts) != 3:
        raise SdpError("bad c= line")
    return Connection(*parts)


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What both sides agreed on, for the RTP session and for building our answer."""

    codec: str  # "PCMU" | "PCMA"
    payload_type: int
    dtmf_payload_type: int | None
    remote_host: str
    remote_port: int
    direction: Direction  # OUR direction in the answer
    ptime: int = 20
    clock_rate: int = 8000
    media_index: int = 0  # which m= line of the offer was accepted
    dtmf_fmtp: str | None = None

    @property
    def on_hold(self) -> bool:
        """The peer does not want to hear us (or anything) now."""
        return self.direction in ("recvonly", "inactive")


def negotiate(offer: SessionDescription, codecs: list[str] | tuple[str, ...] = ("PCMU", "PCMA")) -> Negotiated:
    """Accept the first usable audio stream with the first of OUR codecs the offer lists."""
    for index, media in enumerate(offer.media):
        if media.kind != "audio" or media.port == 0 or media.proto.upper() not in ("RTP/AVP", "RTP/AVPF"):
            continue
        rtpmaps = media.rtpmaps()
        chosen = _choose_codec(media, rtpmaps, codecs)
        if chosen is None:
            continue
        codec, payload_type = chosen
        connection = media.connection or offer.connection
        if connection is None:
            raise SdpError("no c= line for the audio stream")
        dtmf = next(
            (int(pt) for pt in media.formats
             if pt.isdigit() and rtpmaps.get(pt, ("", 0))[0].lower() == "telephone-event" and rtpmaps[pt][1] == 8000),
            None,
        )
        offered = media.direction or offer.direction or "sendrecv"
        if connection.host in _HOLD_ADDRESSES:
            # RFC 3264 8.4 (RFC 2543 style hold): a null address means "do not send to me".
            offered = {"sendrecv": "sendonly", "recvonly": "inactive"}.get(offered, offered)
        return Negotiated(
            codec=codec,
            payload_type=payload_type,
            dtmf_payload_type=dtmf,
            remote_host=connection.host,
            remote_port=media.port,
            direction=_REVERSE.get(offered, "sendrecv"),
            ptime=media.ptime or offer_ptime(offer) or 20,
            media_index=index,
            dtmf_fmtp=media.fmtp(str(dtmf)) if dtmf is not None else None,
        )
    raise NoCommonCodec(f"no audio stream offers any of {', '.join(codecs)}")


def offer_ptime(offer: SessionDescription) -> int | None:
    value = next((v for k, v in offer.attributes if k == "ptime"), None)
    return int(value) if value and value.isdigit() else None


def _choose_codec(
    media: MediaDescription, rtpmaps: dict[str, tuple[str, int]], codecs: list[str] | tuple[str, ...]
) -> tuple[str, int] | None:
    for codec in codecs:
        for pt in media.formats:
            if not pt.isdigit():
                continue
            if pt in rtpmaps:
                name, clock = rtpmaps[pt]
                if name.upper() == codec.upper() and clock == 8000:
                    return codec.upper(), int(pt)
            elif int(pt) == _STATIC_PAYLOAD_TYPES.get(codec.upper()):
                return codec.upper(), int(pt)
    return None


def _addrtype(host: str) -> str:
    return "IP6" if ":" in host else "IP4"


def _audio_media(port: int, formats: list[tuple[int, str]], dtmf: tuple[int, str] | None,
                 ptime: int, direction: Direction) -> MediaDescription:
    media = MediaDescription("audio", port, "RTP/AVP", [str(pt) for pt, _ in formats])
    media.attributes = [("rtpmap", f"{pt} {name}/8000") for pt, name in formats]
    if dtmf is not None:
        media.formats.append(str(dtmf[0]))
        media.attributes += [("rtpmap", f"{dtmf[0]} telephone-event/8000"), ("fmtp", f"{dtmf[0]} {dtmf[1]}")]
    media.attributes += [("ptime", str(ptime)), (direction, None)]
    return media


def build_answer(
    negotiated: Negotiated,
    local_host: str,
    local_port: int,
    session_id: int,
    direction: Direction | None = None,
    *,
    offer: SessionDescription | None = None,
    session_version: int | None = None,
) -> SessionDescription:
    """Our answer. Give the `offer` so streams we did not take are declined in place (RFC 3264 6)."""
    chosen = _audio_media(
        local_port,
        [(negotiated.payload_type, negotiated.codec)],
        (negotiated.dtmf_payload_type, negotiated.dtmf_fmtp or "0-16")
        if negotiated.dtmf_payload_type is not None else None,
        20,
        direction or negotiated.direction,
    )
    media = [chosen]
    if offer is not None:
        media = [
            chosen if index == negotiated.media_index
            else MediaDescription(m.kind, 0, m.proto, m.formats[:1] or ["0"])
            for index, m in enumerate(offer.media)
        ]
    return SessionDescription(
        origin=Origin("voicegate", str(session_id), str(session_version if session_version is not None else session_id),
                      "IN", _addrtype(local_host), local_host),
        name="voicegate",
        connection=Connection("IN", _addrtype(local_host), local_host),
        media=media,
    )


def build_offer(
    local_host: str,
    local_port: int,
    codecs: list[str] | tuple[str, ...] = ("PCMU", "PCMA"),
    dtmf: bool = True,
    *,
    session_id: int | None = None,
    dtmf_payload_type: int = 101,
    direction: Direction = "sendrecv",
) -> SessionDescription:
    sid = session_id if session_id is not None else int(time.time())
    formats = [(_STATIC_PAYLOAD_TYPES[c.upper()], c.upper()) for c in codecs if c.upper() in _STATIC_PAYLOAD_TYPES]
    if not formats:
        raise NoCommonCodec("no codec we can offer")
    return SessionDescription(
        origin=Origin("voicegate", str(sid), str(sid), "IN", _addrtype(local_host), local_host),
        name="voicegate",
        connection=Connection("IN", _addrtype(local_host), local_host),
        media=[_audio_media(local_port, formats, (dtmf_payload_type, "0-16") if dtmf else None, 20, direction)],
    )
