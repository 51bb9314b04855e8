"""Registration policy and config, without a registrar: timings, what a 2xx grants, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.config import ConfigError, load_config, masked, render_toml, secret_values
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip.caller import resolve_sip_identity
from voicegate.internal.sip.message import SipRequest, SipResponse, parse
from voicegate.internal.sip.registration import RegistrationStatus
from voicegate.internal.sip.registration_policy import (
    BACKOFF_CAP_S,
    RegistrarPeer,
    backoff_delay,
    granted_expiry,
    min_expires,
    refresh_delay,
    registrar_sources,
    retry_after,
)
from voicegate.internal.sip_grammar.uri import SipUri

OURS = SipUri.parse("sip:alice@203.0.113.5:5062")


def response(*headers: str, status: str = "200 OK") -> SipResponse:
    lines = [f"SIP/2.0 {status}", "Via: SIP/2.0/UDP 203.0.113.5:5062;branch=z9hG4bK-1", "From: <sip:alice@pbx>;tag=a",
             "To: <sip:alice@pbx>;tag=b", "Call-ID: reg-1", "CSeq: 2 REGISTER", *headers, "Content-Length: 0"]
    message = parse(("\r\n".join(lines) + "\r\n\r\n").encode())
    assert isinstance(message, SipResponse)
    return message


# ---- timing ----------------------------------------------------------------------------------------

def test_refresh_comes_at_half_the_grant_for_long_grants() -> None:
    assert refresh_delay(3600) == 1800


def test_refresh_comes_30_s_before_expiry_when_that_is_earlier() -> None:
    assert refresh_delay(70) == 35  # half
    assert refresh_delay(50) == 20  # 50 - 30 < 25


def test_refresh_is_never_sooner_than_5_s_whatever_the_grant() -> None:
    assert refresh_delay(10) == 5
    assert refresh_delay(1) == 5


def test_backoff_doubles_per_failure_and_is_capped() -> None:
    highest = lambda low, high: high  # noqa: E731  the top of the jitter range
    assert [backoff_delay(n, uniform=highest) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert backoff_delay(30, uniform=highest) == BACKOFF_CAP_S


def test_backoff_jitter_stays_between_half_and_full() -> None:
    seen = [backoff_delay(3) for _ in range(200)]
    assert all(4 <= delay <= 8 for delay in seen) and len(set(seen)) > 1


def test_backoff_waits_at_least_the_registrars_retry_after() -> None:
    assert backoff_delay(1, retry_after_s=120) == 120
    assert retry_after(response("Retry-After: 120 (maintenance);duration=60", status="503 Service Unavailable")) == 120
    assert retry_after(response(status="503 Service Unavailable")) is None


def test_min_expires_is_read_from_a_423() -> None:
    assert min_expires(response("Min-Expires: 600", status="423 Interval Too Brief")) == 600
    assert min_expires(response(status="423 Interval Too Brief")) is None


# ---- what a 2xx grants -------------------------------------------------------------------------------

def test_our_contacts_expires_parameter_wins_over_the_expires_header() -> None:
    granted = response("Contact: <sip:bob@198.51.100.1>;expires=3600, <sip:alice@203.0.113.5:5062>;expires=300",
                       "Expires: 3600")
    assert granted_expiry(granted, OURS, 3600) == 300


def test_expires_header_applies_when_our_binding_has_no_parameter() -> None:
    assert granted_expiry(response("Contact: <sip:alice@203.0.113.5:5062>", "Expires: 120"), OURS, 3600) == 120


def test_a_registrar_that_echoes_nothing_grants_what_we_asked() -> None:
    assert granted_expiry(response(), OURS, 3600) == 3600


def test_other_bindings_do_not_count_as_ours() -> None:
    assert granted_expiry(response("Contact: <sip:alice@203.0.113.5:5999>;expires=10"), OURS, 600) == 600


def test_unreadable_contact_falls_back_to_the_expires_header() -> None:
    granted = response("Expires: 90")
    granted.headers.set("Contact", "<sip:alice@203.0.113.5:5062;expires=10")  # the parser would refuse it
    assert granted_expiry(granted, OURS, 600) == 90


# ---- identity ----------------------------------------------------------------------------------------

def test_only_registrars_we_are_registered_with_are_trusted() -> None:
    peers = [RegistrarPeer("192.0.2.10", True), RegistrarPeer("192.0.2.11", False), RegistrarPeer("192.0.2.10", True)]
    assert registrar_sources(peers) == ["192.0.2.10"]


def test_a_registrar_reached_over_tls_is_trusted_over_tls_only() -> None:
    """Its TLS connection proves who it is; a UDP packet with its address proves nothing."""
    peers = [RegistrarPeer("192.0.2.10", True, "tls"), RegistrarPeer("192.0.2.20", True, "udp")]
    assert registrar_sources(peers, "tls") == ["192.0.2.10"]
    assert registrar_sources(peers, "udp") == ["192.0.2.20"]
    assert registrar_sources(peers, "tcp") == []
    invite = parse(b"INVITE sip:alice@203.0.113.5 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.10;branch=z9hG4bK-3\r\n"
                    b"From: <sip:+14155550100@pbx>;tag=x\r\nTo: <sip:alice@203.0.113.5>\r\nCall-ID: c\r\n"
                    b"CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(invite, SipRequest)
    over_udp = resolve_sip_identity(invite, "192.0.2.10", trusted_peers=registrar_sources(peers, "udp"),
                                    authenticated_user=None, region="US")
    assert over_udp.is_anonymous  # a forged From over UDP from the TLS registrar's address names nobody


def test_an_invite_from_a_registered_registrar_is_resolved_like_a_trusted_peer() -> None:
    invite = parse(b"INVITE sip:alice@203.0.113.5 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.10;branch=z9hG4bK-2\r\n"
                    b"From: <sip:+14155550100@pbx>;tag=x\r\nTo: <sip:alice@203.0.113.5>\r\nCall-ID: c\r\n"
                    b"CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(invite, SipRequest)
    trusted = registrar_sources([RegistrarPeer("192.0.2.10", True)])
    identity = resolve_sip_identity(invite, "192.0.2.10", trusted_peers=trusted, authenticated_user=None, region="US")
    assert identity.resource_id == "sip:+14155550100"
    stranger = resolve_sip_identity(invite, "192.0.2.99", trusted_peers=trusted, authenticated_user=None, region="US")
    assert stranger.is_anonymous


def test_status_for_health_names_the_account_but_not_the_password() -> None:
    status = RegistrationStatus("sip:pbx.example", "alice", "registered", 200, "OK", expires_at=1000.0,
                                registered_count=1)
    described = status.describe(now=900.0)
    assert described["state"] == "registered" and described["expires_in_s"] == 100.0
    assert "password" not in described


# ---- config ------------------------------------------------------------------------------------------

def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


ACCOUNT = '[[sip.registrations]]\nregistrar = "sip:pbx.example:5060"\nusername = "100"\n'


def test_registrations_are_read_from_an_array_of_tables(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ACCOUNT + 'password = "pw-1"\n' + ACCOUNT.replace("100", "200")
                               + 'password = "pw-2"\nexpires = 600\ntransport = "TCP"\n'))
    first, second = config.sip.registrations
    assert (first.username, first.expires, first.transport) == ("100", 3600, "")
    assert (second.username, second.expires, second.transport) == ("200", 600, "tcp")


def test_password_env_reads_the_password_from_the_named_variable(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBX_PASSWORD", "from-env-pw")
    config = load_config(write(tmp_path, ACCOUNT + 'password_env = "PBX_PASSWORD"\n'))
    assert config.sip.registrations[0].password == "from-env-pw"


def test_password_env_naming_an_unset_variable_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, ACCOUNT + 'password_env = "VOICEGATE_TEST_UNSET_PASSWORD"\n'))
    assert "sip.registrations.0" in str(error.value) and "VOICEGATE_TEST_UNSET_PASSWORD" in str(error.value)


@pytest.mark.parametrize(("line", "expected"), [
    ('registrar = "http://pbx.example"', "registrar must be a sip: or sips: URI"),
    ('expires = 30', "sip.registrations.0.expires: must be >= 60"),
    ('expires = 100000', "sip.registrations.0.expires: must be <= 86400"),
    ('outbound_proxy = "proxy.example"', "outbound_proxy must be a sip: or sips: URI"),
    ('transport = "sctp"', "'sctp' is not one of sip.transports"),
    ('colour = "blue"', "sip.registrations.0.colour: unknown key"),
])
def test_bad_registration_names_the_key_and_the_reason(tmp_path: Path, line: str, expected: str) -> None:
    text = ACCOUNT.replace('registrar = "sip:pbx.example:5060"\n', "") if line.startswith("registrar") else ACCOUNT
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, text + line + "\n"))
    assert expected in str(error.value)


def test_registration_transport_must_be_enabled() -> None:
    with pytest.raises(ValueError, match=r"'tcp' is not one of sip\.transports"):
        SipConfig(transports=["udp"], registrations=[{"registrar": "sip:pbx", "username": "1", "transport": "tcp"}])


def test_registration_password_is_masked_redacted_and_kept_out_of_repr(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ACCOUNT + 'password = "very-secret-pw"\n'))
    assert "very-secret-pw" not in render_toml(masked(config))
    assert masked(config)["sip"]["registrations"][0]["password"] == "********"
    assert "very-secret-pw" in secret_values(config)
    assert "very-secret-pw" not in repr(config.sip.registrations[0]) + str(config.sip)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_refresh_is_never_sooner_than_the_floor_nor_after_the_grant_ends(granted: float) -> None:
    delay = refresh_delay(granted)
    assert delay >= 5
    if granted >= 10:
        assert delay <= granted / 2


@given(st.integers(min_value=1, max_value=1000), st.floats(min_value=0, max_value=1))
def test_backoff_is_between_half_and_all_of_a_capped_doubling(failures: int, fraction: float) -> None:
    delay = backoff_delay(failures, uniform=lambda low, high: low + (high - low) * fraction)
    ceiling = min(BACKOFF_CAP_S, 2.0 ** failures)
    assert ceiling / 2 <= delay <= ceiling
