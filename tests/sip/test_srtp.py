"""SDES (RFC 4568) crypto attributes, the sip.srtp policy, and SRTP protect/unprotect with libsrtp."""

from __future__ import annotations

import base64

import pytest

from voicegate.internal.audio.rtp import RtpPacket, rtp_header
from voicegate.internal.audio.srtp import SrtpContext
from voicegate.internal.config import load_config, security_warnings
from voicegate.internal.sip.sdes import (
    CryptoAttribute,
    SrtpMode,
    SrtpPolicyError,
    crypto_of,
    negotiate_media,
    new_key,
    secure_answer,
    secure_offer,
)
from voicegate.internal.sip.sdp import SdpError, SessionDescription, build_answer, build_offer

KEY = bytes(range(30))
INLINE = base64.b64encode(KEY).decode()


def offer(proto: str = "RTP/SAVP", *cryptos: str) -> SessionDescription:
    lines = ["v=0", "o=- 1 1 IN IP4 127.0.0.1", "s=-", "c=IN IP4 127.0.0.1", "t=0 0",
             f"m=audio 6000 {proto} 0 101", "a=rtpmap:0 PCMU/8000", "a=rtpmap:101 telephone-event/8000",
             *(f"a=crypto:{c}" for c in cryptos)]
    return SessionDescription.parse("\r\n".join(lines) + "\r\n")


def answer_for(sdp: SessionDescription, mode: SrtpMode) -> tuple[SessionDescription, bytes | None]:
    negotiated, keys = negotiate_media(sdp, ["PCMU"], mode)
    built = build_answer(negotiated, "127.0.0.1", 40000, 7, offer=sdp)
    return SessionDescription.parse(secure_answer(built, sdp, negotiated, keys).serialise()), \
        keys.local if keys else None


# ---- a=crypto ----------------------------------------------------------------------------------------


def test_crypto_attribute_parses_and_serialises_back() -> None:
    value = f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}|2^20"
    attribute = CryptoAttribute.parse(value)
    assert (attribute.tag, attribute.suite, attribute.key_salt, attribute.lifetime) == (
        1, "AES_CM_128_HMAC_SHA1_80", KEY, "2^20")
    assert attribute.usable and attribute.value() == value
    assert INLINE not in repr(attribute)  # keys never reach a log through repr


@pytest.mark.parametrize("value", [
    "AES_CM_128_HMAC_SHA1_80 inline:abc",                       # no tag
    f"1 AES_CM_128_HMAC_SHA1_80 {INLINE}",                      # no inline:
    "1 AES_CM_128_HMAC_SHA1_80 inline:not*base64!",             # not base64
    f"1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(bytes(16)).decode()}",  # 16 bytes, not 30
])
def test_malformed_crypto_attribute_is_an_sdp_error(value: str) -> None:
    with pytest.raises(SdpError):
        CryptoAttribute.parse(value)


def test_mki_and_session_parameters_are_not_used_and_the_80_bit_tag_is_preferred() -> None:
    media = offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_32 inline:{INLINE}",
                  f"2 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}|1:4", f"3 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}",
                  f"4 AES_CM_128_HMAC_SHA1_80 inline:{INLINE} UNENCRYPTED_SRTP", "5 AEAD_AES_256_GCM inline:x",
                  "junk").media[0]
    chosen = crypto_of(media)
    assert chosen is not None and (chosen.tag, chosen.suite) == (3, "AES_CM_128_HMAC_SHA1_80")


# ---- the sip.srtp policy -----------------------------------------------------------------------------


def test_srtp_offer_gets_an_srtp_answer_with_our_own_key() -> None:
    sdp = offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}")
    modes: tuple[SrtpMode, ...] = ("accept", "optional", "required")
    for mode in modes:
        answer, local = answer_for(sdp, mode)
        media = answer.media[0]
        assert media.proto == "RTP/SAVP" and media.port == 40000
        crypto = CryptoAttribute.parse(media.attribute("crypto") or "")
        assert crypto.tag == 1 and crypto.suite == "AES_CM_128_HMAC_SHA1_80"
        assert crypto.key_salt == local and len(crypto.key_salt) == 30 and crypto.key_salt != KEY


def test_the_default_answers_an_srtp_offer_with_srtp_a_plain_one_plain_and_offers_plain() -> None:
    """A caller that offers only SRTP is not turned away by a server nobody configured for it."""
    default = load_config(None).sip.srtp
    assert default == "accept"
    secured, key = answer_for(offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}"), default)
    assert secured.media[0].proto == "RTP/SAVP" and key is not None
    plain, none = answer_for(offer("RTP/AVP"), default)
    assert plain.media[0].proto == "RTP/AVP" and plain.media[0].attribute("crypto") is None and none is None
    ours = build_offer("127.0.0.1", 40000, ["PCMU"], session_id=1)
    assert secure_offer(ours, default) is None and b"crypto" not in ours.serialise()
    assert not [w for w in security_warnings(load_config(None)) if w.startswith("sip.srtp")]


def test_srtp_only_offer_is_refused_when_srtp_is_off() -> None:
    with pytest.raises(SrtpPolicyError, match=r"sip.srtp = off") as refused:
        negotiate_media(offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}"), ["PCMU"], "off")
    assert refused.value.warning_code == 302


def test_best_effort_crypto_on_plain_rtp_is_ignored_when_off_and_taken_when_optional() -> None:
    sdp = offer("RTP/AVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}")
    plain, no_key = answer_for(sdp, "off")
    assert plain.media[0].proto == "RTP/AVP" and plain.media[0].attribute("crypto") is None and no_key is None
    secured, key = answer_for(sdp, "optional")
    assert secured.media[0].proto == "RTP/AVP" and key is not None and secured.media[0].attribute("crypto")


def test_srtp_stream_is_preferred_over_its_plain_alternative_when_optional() -> None:
    text = offer("RTP/AVP").serialise().decode() + (
        f"m=audio 6002 RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}\r\n")
    answer, key = answer_for(SessionDescription.parse(text), "optional")
    assert [m.port for m in answer.media] == [0, 40000] and answer.media[1].proto == "RTP/SAVP" and key
    plain, no_key = answer_for(SessionDescription.parse(text), "off")
    assert [m.port for m in plain.media] == [40000, 0] and no_key is None


def test_plain_offer_gets_plain_rtp_when_optional() -> None:
    answer, key = answer_for(offer("RTP/AVP"), "optional")
    assert key is None and answer.media[0].attribute("crypto") is None


def test_plain_offer_is_refused_with_warning_399_when_srtp_is_required() -> None:
    with pytest.raises(SrtpPolicyError, match="SRTP required") as refused:
        negotiate_media(offer("RTP/AVP"), ["PCMU"], "required")
    assert refused.value.warning_code == 399


def test_srtp_offer_with_only_suites_we_lack_is_refused() -> None:
    with pytest.raises(SrtpPolicyError, match="without a usable a=crypto"):
        negotiate_media(offer("RTP/SAVP", "1 AEAD_AES_256_GCM inline:" + INLINE), ["PCMU"], "optional")


def test_our_offer_and_the_answer_to_it_give_both_sides_mirrored_keys() -> None:
    cases: tuple[tuple[SrtpMode, str], ...] = (("optional", "RTP/AVP"), ("required", "RTP/SAVP"))
    for mode, proto in cases:
        ours = build_offer("127.0.0.1", 40000, ["PCMU"])
        our_key = secure_offer(ours, mode)
        assert ours.media[0].proto == proto and our_key is not None
        theirs = SessionDescription.parse(ours.serialise())
        their_negotiated, their_keys = negotiate_media(theirs, ["PCMU"], "required")
        reply = secure_answer(build_answer(their_negotiated, "127.0.0.1", 6000, 1, offer=theirs), theirs,
                              their_negotiated, their_keys)
        _, our_keys = negotiate_media(SessionDescription.parse(reply.serialise()), ["PCMU"], mode, our_key)
        assert their_keys is not None and our_keys is not None
        assert (our_keys.local, our_keys.remote) == (their_keys.remote, their_keys.local)


def test_re_offer_keeps_our_key() -> None:
    sdp = offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}")
    _, first = negotiate_media(sdp, ["PCMU"], "optional")
    assert first is not None
    _, again = negotiate_media(sdp, ["PCMU"], "optional", first.local)
    assert again == first


# ---- SRTP packets ------------------------------------------------------------------------------------


def pair() -> tuple[SrtpContext, SrtpContext]:
    ours, theirs = new_key(), new_key()
    return (SrtpContext("AES_CM_128_HMAC_SHA1_80", ours, theirs),
            SrtpContext("AES_CM_128_HMAC_SHA1_80", theirs, ours))


def test_srtp_round_trip_encrypts_the_payload_and_restores_it() -> None:
    sender, receiver = pair()
    payload = bytes(range(160))
    packet = rtp_header(0, 1000, 160, 0x1234, False) + payload
    protected = sender.protect(packet)
    assert payload not in protected and len(protected) == len(packet) + 10  # 80-bit auth tag
    clear = receiver.unprotect(protected)
    assert clear == packet and RtpPacket.parse(clear).payload == payload
    assert receiver.rejected == 0


def test_tampered_or_replayed_packet_is_dropped_and_counted() -> None:
    sender, receiver = pair()
    protected = sender.protect(rtp_header(0, 1, 160, 0x1234, False) + bytes(160))
    tampered = bytearray(protected)
    tampered[20] ^= 0x01
    assert receiver.unprotect(bytes(tampered)) is None
    assert receiver.unprotect(protected) is not None
    assert receiver.unprotect(protected) is None  # the same packet again: a replay
    assert receiver.unprotect(b"\x80\x00") is None  # garbage never raises
    assert receiver.rejected == 3


def test_srtcp_round_trip_and_a_wrong_key_is_refused() -> None:
    sender, receiver = pair()
    report = bytes([0x80, 201, 0, 1]) + (0x1234).to_bytes(4, "big")  # an empty receiver report
    assert receiver.unprotect_rtcp(sender.protect_rtcp(report)) == report
    stranger = SrtpContext("AES_CM_128_HMAC_SHA1_80", new_key(), new_key())
    assert stranger.unprotect_rtcp(sender.protect_rtcp(report)) is None and stranger.rejected == 1


def test_srtp_without_tls_is_warned_about_by_config_check() -> None:
    config = load_config(None)
    config.sip.srtp = "optional"
    (warning,) = [w for w in security_warnings(config) if w.startswith("sip.srtp")]
    assert 'sip.transports has no "tls"' in warning
    config.sip.srtp = "off"
    assert not [w for w in security_warnings(config) if w.startswith("sip.srtp")]
