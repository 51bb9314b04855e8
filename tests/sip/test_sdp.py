"""SDP parsing/serialising and the offer/answer rules for G.711 + telephone-event."""

from __future__ import annotations

import pytest

from voicegate.internal.sip import NoCommonCodec, SdpError, SessionDescription, build_answer, build_offer, negotiate


def sdp(*media_lines: str, connection: str = "c=IN IP4 192.0.2.10", session_extra: tuple[str, ...] = ()) -> bytes:
    lines = ["v=0", "o=- 1 1 IN IP4 192.0.2.10", "s=-", connection, "t=0 0", *session_extra, *media_lines]
    return ("\r\n".join(lines) + "\r\n").encode()


SIPP_LIKE = sdp(
    "m=audio 6000 RTP/AVP 0 8 101", "a=rtpmap:0 PCMU/8000", "a=rtpmap:8 PCMA/8000",
    "a=rtpmap:101 telephone-event/8000", "a=fmtp:101 0-15", "a=ptime:20", "a=sendrecv",
)


def test_parse_and_serialise_round_trip() -> None:
    text = (
        "v=0\r\no=jdoe 2890844526 2890842807 IN IP4 10.47.16.5\r\ns=SDP Seminar\r\ni=A Seminar\r\n"
        "u=http://www.example.com/seminars/sdp.pdf\r\ne=j.doe@example.com (Jane Doe)\r\nc=IN IP4 224.2.17.12/127\r\n"
        "b=AS:128\r\nt=2873397496 2873404696\r\nr=7d 1h 0 25h\r\na=recvonly\r\nm=audio 49170 RTP/AVP 0\r\n"
        "i=voice\r\nc=IN IP4 10.0.0.1\r\nb=AS:64\r\na=rtpmap:0 PCMU/8000\r\nm=video 51372/2 RTP/AVP 99\r\n"
        "a=rtpmap:99 h263-1998/90000\r\n"
    )
    parsed = SessionDescription.parse(text)
    assert parsed.serialise().decode() == text
    assert SessionDescription.parse(parsed.serialise()) == parsed
    assert parsed.connection is not None and parsed.connection.host == "224.2.17.12"
    assert parsed.media[1].port_count == 2 and parsed.direction == "recvonly"
    assert parsed.media[0].connection is not None and parsed.media[0].connection.address == "10.0.0.1"


@pytest.mark.parametrize("text", [
    b"", b"o=x\r\n", b"v=0\r\nm=audio\r\n", b"v=0\r\nbad line\r\n", b"v=0\r\nc=IN IP4\r\n",
    b"v=0\r\nm=audio 99999 RTP/AVP 0\r\n", b"v=0\r\n\xff\r\n",
])
def test_bad_sdp_is_refused(text: bytes) -> None:
    with pytest.raises(SdpError):
        SessionDescription.parse(text)


def test_pcmu_preferred_when_both_offered() -> None:
    result = negotiate(SessionDescription.parse(SIPP_LIKE))
    assert (result.codec, result.payload_type, result.dtmf_payload_type) == ("PCMU", 0, 101)
    assert (result.remote_host, result.remote_port) == ("192.0.2.10", 6000)
    assert (result.direction, result.ptime) == ("sendrecv", 20)


def test_our_preference_wins_over_the_offer_order() -> None:
    offer = SessionDescription.parse(sdp("m=audio 6000 RTP/AVP 8 0", "a=rtpmap:8 PCMA/8000", "a=rtpmap:0 PCMU/8000"))
    assert negotiate(offer).codec == "PCMU"
    assert negotiate(offer, ["PCMA", "PCMU"]).codec == "PCMA"


def test_pcma_only_offer() -> None:
    result = negotiate(SessionDescription.parse(sdp("m=audio 7000 RTP/AVP 8", "a=rtpmap:8 PCMA/8000")))
    assert (result.codec, result.payload_type, result.dtmf_payload_type) == ("PCMA", 8, None)


def test_static_payload_types_without_rtpmap_are_recognised() -> None:
    result = negotiate(SessionDescription.parse(sdp("m=audio 7000 RTP/AVP 18 8")))
    assert (result.codec, result.payload_type) == ("PCMA", 8)


def test_dynamic_payload_type_named_pcmu_is_accepted() -> None:
    offer = SessionDescription.parse(
        sdp("m=audio 7000 RTP/AVP 96 100", "a=rtpmap:96 PCMU/8000", "a=rtpmap:100 telephone-event/8000")
    )
    result = negotiate(offer)
    assert (result.payload_type, result.dtmf_payload_type) == (96, 100)


def test_no_common_codec_raises() -> None:
    offer = SessionDescription.parse(sdp("m=audio 7000 RTP/AVP 18 9", "a=rtpmap:18 G729/8000", "a=rtpmap:9 G722/8000"))
    with pytest.raises(NoCommonCodec):
        negotiate(offer)


def test_rtpmap_overrides_static_meaning_and_disabled_streams_are_skipped() -> None:
    offer = SessionDescription.parse(sdp(
        "m=audio 0 RTP/AVP 0", "m=video 5000 RTP/AVP 0", "m=audio 7000 RTP/AVP 0", "a=rtpmap:0 OPUS/48000",
        "m=audio 8000 RTP/AVP 8",
    ))
    result = negotiate(offer)
    assert (result.media_index, result.remote_port, result.codec) == (3, 8000, "PCMA")


def test_telephone_event_absent_gives_no_dtmf() -> None:
    result = negotiate(SessionDescription.parse(sdp("m=audio 7000 RTP/AVP 0")))
    assert result.dtmf_payload_type is None
    answer = build_answer(result, "192.0.2.1", 30000, 42)
    assert answer.media[0].formats == ["0"]
    assert not any(value and "telephone-event" in value for _, value in answer.media[0].attributes)


@pytest.mark.parametrize(
    ("media_extra", "session_extra", "connection", "expected"),
    [
        (("a=sendonly",), (), "c=IN IP4 192.0.2.10", "recvonly"),
        (("a=inactive",), (), "c=IN IP4 192.0.2.10", "inactive"),
        ((), ("a=sendonly",), "c=IN IP4 192.0.2.10", "recvonly"),
        (("a=recvonly",), (), "c=IN IP4 192.0.2.10", "sendonly"),
        ((), (), "c=IN IP4 0.0.0.0", "recvonly"),
        (("a=recvonly",), (), "c=IN IP4 0.0.0.0", "inactive"),
    ],
)
def test_hold_offers_give_the_answer_direction(
    media_extra: tuple[str, ...], session_extra: tuple[str, ...], connection: str, expected: str
) -> None:
    offer = SessionDescription.parse(sdp("m=audio 7000 RTP/AVP 0", *media_extra, connection=connection,
                                         session_extra=session_extra))
    result = negotiate(offer)
    assert result.direction == expected
    assert result.on_hold == (expected in ("recvonly", "inactive"))


def test_media_level_connection_wins() -> None:
    offer = SessionDescription.parse(sdp("m=audio 7000 RTP/AVP 0", "c=IN IP4 198.51.100.7"))
    assert negotiate(offer).remote_host == "198.51.100.7"


def test_missing_connection_is_an_sdp_error() -> None:
    with pytest.raises(SdpError):
        negotiate(SessionDescription.parse(b"v=0\r\no=- 1 1 IN IP4 h\r\ns=-\r\nt=0 0\r\nm=audio 1 RTP/AVP 0\r\n"))


def test_answer_mirrors_the_offer_and_declines_other_streams() -> None:
    offer = SessionDescription.parse(sdp("m=video 5000 RTP/AVP 31", *SIPP_LIKE.decode().split("\r\n")[5:-1]))
    result = negotiate(offer)
    answer = build_answer(result, "192.0.2.1", 30000, 42, offer=offer)
    assert [m.port for m in answer.media] == [0, 30000]
    audio = answer.media[1]
    assert audio.formats == ["0", "101"] and audio.direction == "sendrecv"
    assert ("fmtp", "101 0-15") in audio.attributes and ("ptime", "20") in audio.attributes
    assert answer.origin.session_id == "42" and answer.connection is not None
    assert SessionDescription.parse(answer.serialise()) == answer


def test_answer_direction_can_be_overridden() -> None:
    result = negotiate(SessionDescription.parse(SIPP_LIKE))
    answer = build_answer(result, "::1", 30000, 1, "inactive", session_version=5)
    assert answer.media[0].direction == "inactive"
    assert answer.origin.addrtype == "IP6" and answer.origin.session_version == "5"


def test_offer_lists_our_codecs_and_dtmf_and_is_negotiable() -> None:
    offer = build_offer("192.0.2.1", 30000, ["PCMA", "PCMU"], session_id=7)
    media = offer.media[0]
    assert media.formats == ["8", "0", "101"]
    assert media.rtpmaps() == {"8": ("PCMA", 8000), "0": ("PCMU", 8000), "101": ("telephone-event", 8000)}
    assert negotiate(SessionDescription.parse(offer.serialise()), ["PCMA"]).dtmf_payload_type == 101
    assert build_offer("192.0.2.1", 30000, dtmf=False).media[0].formats == ["0", "8"]
