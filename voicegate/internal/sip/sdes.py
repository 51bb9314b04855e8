"""SRTP keys in SDP (SDES, RFC 4568) and the `sip.srtp` policy for offers and answers.

    a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:<base64 of 16-byte key || 14-byte salt>

Each side sends with the key it wrote into its own SDP and decrypts with the key of the other side's.
SDES keys travel in the SIP signalling, so they are only as secret as the signalling: use TLS with
SRTP. Nothing here logs or formats a key except `crypto_line`, which is what goes into our SDP.

Policy (`sip.srtp`):
- "off": plain RTP only. An offer whose audio is only RTP/SAVP gets 488 (Warning 302); a=crypto lines
  on an RTP/AVP stream are ignored, so the caller falls back to plain RTP.
- "accept" (default): an offer is answered in kind, SRTP when it carries a usable key (RTP/SAVP, or
  RTP/AVP with a=crypto), plain RTP when it is plain; our own offers are plain RTP/AVP. A caller that
  offers only SRTP is not turned away, and nothing changes for one that does not.
- "optional": an offered key (RTP/SAVP, or RTP/AVP with a=crypto, "best effort" SRTP) is accepted and
  answered with ours; a plain offer gets plain RTP. Our own offers are RTP/AVP with a=crypto, so a
  peer without SRTP still answers (plain) while one with SRTP encrypts.
- "required": only streams with a usable key; a plain offer gets 488 with Warning 399 saying SRTP is
  required. Our offers are RTP/SAVP with a=crypto.
"""

from __future__ import annotations

import base64
import binascii
import copy
import secrets
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.sip.sdp import (
    MediaDescription,
    Negotiated,
    NoCommonCodec,
    SdpError,
    SessionDescription,
    negotiate,
)

SrtpMode = Literal["off", "accept", "optional", "required"]
# Suites we can run with pylibsrtp, in order of preference; both take a 30-byte key || salt.
SUITES = ("AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32")
KEY_SALT_BYTES = 30
SECURE_PROTOS = ("RTP/SAVP", "RTP/SAVPF")
PLAIN_PROTOS = ("RTP/AVP", "RTP/AVPF")


class SrtpPolicyError(SdpError):
    """The SDP and `sip.srtp` cannot agree; the UA answers 488 with this Warning code and text."""

    def __init__(self, message: str, warning_code: int) -> None:
        super().__init__(message)
        self.warning_code = warning_code


@dataclass(frozen=True, slots=True)
class CryptoAttribute:
    tag: int
    suite: str
    key_salt: bytes
    lifetime: str | None = None
    mki: str | None = None
    session_params: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the key never reaches a log through a repr
        return f"CryptoAttribute(tag={self.tag}, suite={self.suite!r})"

    @property
    def usable(self) -> bool:
        """One we can run: a known suite, the one key per direction we keep (no MKI), no session
        parameters (UNENCRYPTED_SRTP and friends change the packet format)."""
        return self.suite in SUITES and self.mki is None and not self.session_params

    @staticmethod
    def parse(value: str) -> CryptoAttribute:
        """The value of an a=crypto attribute (after "crypto:"). Raises SdpError when malformed."""
        parts = value.split()
        if len(parts) < 3 or not parts[0].isdigit() or len(parts[0]) > 9:
            raise SdpError("bad a=crypto line")
        tag, suite, key_params, session_params = int(parts[0]), parts[1], parts[2], tuple(parts[3:])
        method, _, info = key_params.partition(":")
        if method != "inline" or not info:
            raise SdpError("a=crypto key must be inline:")
        encoded, *rest = info.split(";", 1)[0].split("|")  # several keys (";") : the first one counts
        if len(rest) > 2:
            raise SdpError("bad a=crypto key parameters")
        lifetime = next((r for r in rest if ":" not in r), None)
        mki = next((r for r in rest if ":" in r), None)
        try:
            key_salt = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SdpError("a=crypto key is not base64") from None
        if suite in SUITES and len(key_salt) != KEY_SALT_BYTES:
            raise SdpError(f"a=crypto {suite} key must be {KEY_SALT_BYTES} bytes")
        return CryptoAttribute(tag, suite, key_salt, lifetime, mki, session_params)

    def value(self) -> str:
        key = base64.b64encode(self.key_salt).decode("ascii")
        extra = "".join(f"|{p}" for p in (self.lifetime, self.mki) if p is not None)
        return " ".join([str(self.tag), self.suite, f"inline:{key}{extra}", *self.session_params])


@dataclass(frozen=True, slots=True)
class SrtpKeys:
    """What one call's SRTP needs: the suite, our key (we send with it) and the peer's."""

    suite: str
    local: bytes
    remote: bytes
    tag: int = 1

    def __repr__(self) -> str:
        return f"SrtpKeys(suite={self.suite!r}, tag={self.tag})"


def new_key() -> bytes:
    return secrets.token_bytes(KEY_SALT_BYTES)


def crypto_of(media: MediaDescription) -> CryptoAttribute | None:
    """The offered key we like best (our suite order); malformed lines are skipped, not fatal, since a
    later line may still be one we can use."""
    found: list[CryptoAttribute] = []
    for name, value in media.attributes:
        if name == "crypto" and value:
            try:
                attribute = CryptoAttribute.parse(value)
            except SdpError:
                continue
            if attribute.usable:
                found.append(attribute)
    return min(found, key=lambda a: SUITES.index(a.suite), default=None)


def negotiate_media(sdp: SessionDescription, codecs: list[str] | tuple[str, ...], mode: SrtpMode,
                    local_key: bytes | None = None) -> tuple[Negotiated, SrtpKeys | None]:
    """`sdp.negotiate` under the SRTP policy: the stream to use, and its keys when it is SRTP.

    For an offer we receive, `local_key` is the key we answered with before (a re-INVITE keeps it);
    for the answer to our own offer, the key we offered. Without one a fresh key is made.
    """
    usable: list[bool] = []
    keys: list[CryptoAttribute | None] = []
    for media in sdp.media:
        proto = media.proto.upper()
        crypto = crypto_of(media) if mode != "off" and proto in (*SECURE_PROTOS, *PLAIN_PROTOS) else None
        keys.append(crypto)
        if mode == "off":
            usable.append(proto in PLAIN_PROTOS)
        elif mode in ("accept", "optional"):
            usable.append(proto in PLAIN_PROTOS or crypto is not None)
        else:
            usable.append(crypto is not None)
    if not any(usable):
        raise _refusal(sdp, mode)
    secure = [ok and key is not None for ok, key in zip(usable, keys, strict=True)]
    if mode in ("accept", "optional") and any(secure) and secure != usable:
        # An SRTP stream and a plain alternative (two m= lines): take the secure one when we can.
        try:
            negotiated = _negotiate_among(sdp, codecs, secure)
        except NoCommonCodec:
            negotiated = _negotiate_among(sdp, codecs, usable)
    else:
        negotiated = _negotiate_among(sdp, codecs, usable)
    crypto = keys[negotiated.media_index]
    if crypto is None:
        return negotiated, None
    return negotiated, SrtpKeys(crypto.suite, local_key or new_key(), crypto.key_salt, crypto.tag)


def _negotiate_among(sdp: SessionDescription, codecs: list[str] | tuple[str, ...], allowed: list[bool]) -> Negotiated:
    """sdp.negotiate knows codecs, addresses and directions: hand it only the streams the policy allows."""
    copied = copy.deepcopy(sdp)
    for index, media in enumerate(copied.media):
        if not allowed[index]:
            media.port = 0
        elif media.proto.upper() in SECURE_PROTOS:
            media.proto = media.proto.upper().replace("SAVP", "AVP")
    return negotiate(copied, codecs)


def _refusal(sdp: SessionDescription, mode: SrtpMode) -> SdpError:
    audio = [m for m in sdp.media if m.kind == "audio" and m.port != 0]
    secure = [m for m in audio if m.proto.upper() in SECURE_PROTOS]
    if mode == "off" and secure:
        return SrtpPolicyError("SRTP (RTP/SAVP) offered but not enabled here (sip.srtp = off)", 302)
    if secure:
        return SrtpPolicyError(f"SRTP offered without a usable a=crypto (we support {', '.join(SUITES)})", 399)
    if mode == "required":
        return SrtpPolicyError(f"SRTP required (sip.srtp = required): offer RTP/SAVP with a=crypto {SUITES[0]}",
                               399)
    return SdpError("no audio stream we can use")


def secure_answer(answer: SessionDescription, offer: SessionDescription, negotiated: Negotiated,
                  keys: SrtpKeys | None) -> SessionDescription:
    """Our answer (from `sdp.build_answer`) with the offer's secure profile and our key on the chosen stream."""
    if keys is None:
        return answer
    media = answer.media[negotiated.media_index] if len(answer.media) > negotiated.media_index else answer.media[0]
    offered = offer.media[negotiated.media_index].proto
    if offered.upper() in SECURE_PROTOS:
        media.proto = offered
    media.attributes.insert(0, ("crypto", crypto_line(keys.tag, keys.suite, keys.local)))
    return answer


def secure_offer(offer: SessionDescription, mode: SrtpMode) -> bytes | None:
    """Add our key to an offer from `sdp.build_offer` (see the policy above); returns that key."""
    if mode in ("off", "accept"):
        return None
    key = new_key()
    for media in offer.media:
        if media.kind == "audio":
            if mode == "required":
                media.proto = "RTP/SAVP"
            media.attributes.insert(0, ("crypto", crypto_line(1, SUITES[0], key)))
    return key


def crypto_line(tag: int, suite: str, key: bytes) -> str:
    return CryptoAttribute(tag, suite, key).value()
