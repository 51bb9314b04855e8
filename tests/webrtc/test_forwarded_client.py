"""Which client a rate limit counts against behind a reverse proxy (`server.trusted_proxies`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voicegate.internal.config import Config
from voicegate.internal.config.loader import ConfigError, load_config
from voicegate.internal.signaling.ratelimit import client_address, forwarded_client

PROXIES = ["127.0.0.1/32", "10.0.0.0/8"]


def test_without_trusted_proxies_the_tcp_peer_is_the_client_whatever_the_header_says() -> None:
    assert forwarded_client("127.0.0.1", "198.51.100.7", []) == "127.0.0.1"


def test_behind_a_trusted_proxy_the_address_it_appended_is_the_client() -> None:
    assert forwarded_client("127.0.0.1", "198.51.100.7", PROXIES) == "198.51.100.7"


def test_a_forged_entry_before_the_proxys_own_is_ignored() -> None:
    # The caller wrote "203.0.113.9"; HAProxy appended the address it really saw.
    assert forwarded_client("127.0.0.1", "203.0.113.9, 198.51.100.7", PROXIES) == "198.51.100.7"


def test_a_proxy_that_adds_its_own_header_line_is_believed_not_the_clients_first_line() -> None:
    """HTTP lets X-Forwarded-For come as several lines (HAProxy's `option forwardfor` adds one): they
    are one list in order, so the client's own line never decides."""
    from starlette.datastructures import Headers
    from starlette.requests import Request

    scope = {"type": "http", "client": ("127.0.0.1", 5000),
             "headers": [(b"x-forwarded-for", b"203.0.113.9"), (b"x-forwarded-for", b"198.51.100.7")]}
    assert Headers(scope=scope).get("x-forwarded-for") == "203.0.113.9"  # what reading one line gives
    assert client_address(Request(scope), PROXIES) == "198.51.100.7"


def test_a_chain_of_trusted_proxies_is_walked_from_the_right() -> None:
    assert forwarded_client("127.0.0.1", "198.51.100.7, 10.1.2.3", PROXIES) == "198.51.100.7"


def test_a_peer_outside_the_trusted_proxies_is_the_client_even_with_the_header() -> None:
    assert forwarded_client("192.0.2.50", "198.51.100.7", PROXIES) == "192.0.2.50"


def test_a_trusted_proxy_that_sent_no_header_is_its_own_client() -> None:
    assert forwarded_client("127.0.0.1", None, PROXIES) == "127.0.0.1"


def test_trusted_proxies_must_be_networks(tmp_path: Path) -> None:
    assert Config().server.trusted_proxies == []
    path = tmp_path / "bad.toml"
    path.write_text('[server]\ntrusted_proxies = ["haproxy"]\n')
    with pytest.raises(ConfigError, match=r"server\.trusted_proxies"):
        load_config(path)
