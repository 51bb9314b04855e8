"""Dialog creation from both sides and in-dialog request routing (RFC 3261 12)."""

from __future__ import annotations

from voicegate.internal.sip import Address, Dialog, SipRequest, make_response, parse

SOURCE = Address("192.0.2.5", 5060, "udp")


def invite(record_route: str = "") -> SipRequest:
    lines = [
        "INVITE sip:agent@192.0.2.1 SIP/2.0",
        "Via: SIP/2.0/UDP 192.0.2.5:5060;branch=z9hG4bK-1",
        '"Caller" <sip:+15551234567@example.com>;tag=remote'.join(["From: ", ""]),
        "To: <sip:agent@192.0.2.1>",
        "Call-ID: dlg-1",
        "CSeq: 10 INVITE",
        "Contact: <sip:caller@192.0.2.5:5062;transport=tcp>",
    ]
    if record_route:
        lines.append(f"Record-Route: {record_route}")
    parsed = parse(("\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode())
    assert isinstance(parsed, SipRequest)
    return parsed


def test_uas_dialog_from_invite() -> None:
    dialog = Dialog.for_uas(invite("<sip:p1.example;lr>, <sip:p2.example;lr>"), "local", SOURCE)
    assert dialog.id == ("dlg-1", "local", "remote")
    assert str(dialog.remote_target) == "sip:caller@192.0.2.5:5062;transport=tcp"
    assert [str(r.uri) for r in dialog.route_set] == ["sip:p1.example;lr", "sip:p2.example;lr"]
    assert dialog.remote_cseq == 10 and dialog.local_cseq == 0 and not dialog.is_caller
    assert dialog.remote_uri.display_name == "Caller" and dialog.remote_uri.tag is None


def test_bye_without_routes_goes_to_the_remote_target() -> None:
    dialog = Dialog.for_uas(invite(), "local", SOURCE)
    bye = dialog.create_request("BYE")
    assert bye.uri == "sip:caller@192.0.2.5:5062;transport=tcp"
    assert bye.from_tag == "local" and bye.to_tag == "remote" and bye.cseq == (1, "BYE")
    assert "Route" not in bye.headers and dialog.transport == "tcp"
    assert dialog.create_request("INFO").cseq == (2, "INFO")


def test_loose_routing_keeps_the_target_in_the_request_uri() -> None:
    dialog = Dialog.for_uas(invite("<sip:p1.example;lr>, <sip:p2.example;lr>"), "local", SOURCE)
    bye = dialog.create_request("BYE")
    assert bye.uri == "sip:caller@192.0.2.5:5062;transport=tcp"
    assert bye.headers.get_all("Route") == ["<sip:p1.example;lr>", "<sip:p2.example;lr>"]
    assert str(dialog.next_hop()) == "sip:p1.example;lr"


def test_strict_routing_puts_the_first_route_in_the_request_uri() -> None:
    dialog = Dialog.for_uas(invite("<sip:strict.example>, <sip:p2.example;lr>"), "local", SOURCE)
    bye = dialog.create_request("BYE")
    assert bye.uri == "sip:strict.example"
    assert bye.headers.get_all("Route") == ["<sip:p2.example;lr>", "<sip:caller@192.0.2.5:5062;transport=tcp>"]


def test_uac_dialog_reverses_the_record_route() -> None:
    request = invite()
    response = make_response(request, 200, "OK", {
        "Contact": "<sip:callee@198.51.100.2>", "Record-Route": "<sip:p2.example;lr>, <sip:p1.example;lr>",
    }, to_tag="callee")
    dialog = Dialog.for_uac(request, response, SOURCE)
    assert dialog.id == ("dlg-1", "remote", "callee") and dialog.is_caller and dialog.state == "confirmed"
    assert [str(r.uri) for r in dialog.route_set] == ["sip:p1.example;lr", "sip:p2.example;lr"]
    ack = dialog.create_ack(10)
    assert ack.cseq == (10, "ACK") and ack.uri == "sip:callee@198.51.100.2"
    assert dialog.local_cseq == 10  # an ACK does not consume a sequence number
    assert dialog.create_request("BYE").cseq == (11, "BYE")


def test_remote_cseq_must_not_go_backwards() -> None:
    dialog = Dialog.for_uas(invite(), "local", SOURCE)
    bye = parse(invite().serialise().replace(b"CSeq: 10 INVITE", b"CSeq: 9 INVITE"))
    assert isinstance(bye, SipRequest)
    assert not dialog.accept_remote_cseq(bye)
    assert dialog.accept_remote_cseq(invite())
