"""Digest authentication: RFC-style known answers (computed with hashlib), nonces, client side."""

from __future__ import annotations

import hashlib

import pytest

from voicegate.internal.sip import DigestAuthenticator, authorization_header, choose_challenge
from voicegate.internal.sip.digest import DigestError, digest_response, parse_digest


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_rfc_2617_style_known_answer_with_qop_auth() -> None:
    # The RFC 2617 3.5 example values: Mufasa / Circle Of Life.
    ha1 = md5("Mufasa:testrealm@host.com:Circle Of Life")
    ha2 = md5("GET:/dir/index.html")
    expected = md5(f"{ha1}:dcd98b7102dd2f0e8b11d0f600bfb0c093:00000001:0a4f113b:auth:{ha2}")
    assert expected == "6629fae49393a05397450978507c4ef1"  # the value printed in RFC 2617
    assert digest_response(
        algorithm="MD5", username="Mufasa", realm="testrealm@host.com", password="Circle Of Life", method="GET",
        uri="/dir/index.html", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", qop="auth", nc="00000001",
        cnonce="0a4f113b",
    ) == expected


def test_sha256_and_no_qop_and_sess_variants() -> None:
    ha1 = sha256("bob:voicegate:pw")
    ha2 = sha256("INVITE:sip:agent@example.com")
    assert digest_response(algorithm="SHA-256", username="bob", realm="voicegate", password="pw", method="INVITE",
                           uri="sip:agent@example.com", nonce="n") == sha256(f"{ha1}:n:{ha2}")
    sess_ha1 = md5(f"{md5('bob:voicegate:pw')}:n:c")
    assert digest_response(algorithm="MD5-sess", username="bob", realm="voicegate", password="pw", method="BYE",
                           uri="sip:x@y", nonce="n", qop="auth", nc="00000001", cnonce="c") == md5(
        f"{sess_ha1}:n:00000001:c:auth:{md5('BYE:sip:x@y')}"
    )
    with pytest.raises(DigestError):
        digest_response(algorithm="SHA-1", username="", realm="", password="", method="", uri="", nonce="")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def authenticator(clock: Clock) -> DigestAuthenticator:
    return DigestAuthenticator("voicegate", {"alice": "s3cret"}, nonce_ttl_s=60, secret=b"k" * 32, clock=clock)


def answer(challenge: str, password: str = "s3cret", uri: str = "sip:agent@192.0.2.1", user: str = "alice") -> str:
    return authorization_header(challenge, method="INVITE", uri=uri, username=user, password=password, cnonce="abcd")


def test_challenge_offers_sha256_then_md5_with_qop_auth() -> None:
    challenges = authenticator(Clock()).challenges()
    params = [parse_digest(c) for c in challenges]
    assert [p["algorithm"] for p in params] == ["SHA-256", "MD5"]
    assert all(p["realm"] == "voicegate" and p["qop"] == "auth" and p["nonce"] for p in params)


@pytest.mark.parametrize("which", [0, 1])
def test_correct_credentials_verify(which: int) -> None:
    auth = authenticator(Clock())
    header = answer(auth.challenges(bind="192.0.2.9")[which])
    result = auth.verify(header, "INVITE", "sip:agent@192.0.2.1", bind="192.0.2.9")
    assert (result.status, result.username) == ("ok", "alice")


def test_only_the_algorithms_and_qop_our_challenge_offered_are_verified() -> None:
    """Right password, but an answer weaker than asked for: an algorithm we did not offer (MD5-sess, or MD5
    from a server offering SHA-256 only) or no qop at all is refused, not verified."""
    sha_only = DigestAuthenticator("voicegate", {"alice": "s3cret"}, nonce_ttl_s=60, secret=b"k" * 32,
                                   clock=Clock(), algorithms=("SHA-256",))
    (offered,) = sha_only.challenges(bind="192.0.2.9")
    nonce = parse_digest(offered)["nonce"]
    for algorithm, qop in (("MD5", "auth"), ("MD5-sess", "auth"), ("SHA-256", None)):
        challenge = f'Digest realm="voicegate", nonce="{nonce}", algorithm={algorithm}'
        challenge += f', qop="{qop}"' if qop else ""
        result = sha_only.verify(answer(challenge), "INVITE", "sip:agent@192.0.2.1", bind="192.0.2.9")
        assert result.status == "invalid", (algorithm, qop, result)
    assert sha_only.verify(answer(offered), "INVITE", "sip:agent@192.0.2.1", bind="192.0.2.9").status == "ok"


def test_wrong_password_unknown_user_and_other_address_are_invalid() -> None:
    auth = authenticator(Clock())
    challenge = auth.challenges(bind="192.0.2.9")[0]
    wrong = auth.verify(answer(challenge, "guess"), "INVITE", "sip:agent@192.0.2.1", bind="192.0.2.9")
    assert wrong.status == "invalid"
    assert auth.verify(answer(challenge, user="mallory"), "INVITE", "sip:agent@192.0.2.1",
                       bind="192.0.2.9").status == "invalid"
    # The nonce is bound to the address it was issued to.
    assert auth.verify(answer(challenge), "INVITE", "sip:agent@192.0.2.1", bind="198.51.100.1").status == "invalid"


def test_nonce_from_another_secret_or_forged_is_invalid() -> None:
    clock = Clock()
    other = DigestAuthenticator("voicegate", {"alice": "s3cret"}, 60, secret=b"x" * 32, clock=clock)
    auth = authenticator(clock)
    assert auth.verify(answer(other.challenges()[0]), "INVITE", "sip:agent@192.0.2.1").status == "invalid"
    forged = 'Digest realm="voicegate", nonce="AAAA", algorithm=MD5, qop="auth"'
    assert auth.verify(answer(forged), "INVITE", "sip:agent@192.0.2.1").status == "invalid"


def test_expired_nonce_with_right_password_is_stale_and_wrong_password_is_invalid() -> None:
    clock = Clock()
    auth = authenticator(clock)
    challenge = auth.challenges()[1]
    clock.now += 61
    assert auth.verify(answer(challenge), "INVITE", "sip:agent@192.0.2.1").status == "stale"
    assert auth.verify(answer(challenge, "guess"), "INVITE", "sip:agent@192.0.2.1").status == "invalid"
    assert "stale=true" in auth.challenges(stale=True)[0]


def test_signed_uri_must_name_the_request_resource() -> None:
    auth = authenticator(Clock())
    challenge = auth.challenges()[0]
    # sipp signs the Request-URI without its user part: same host and port are accepted...
    assert auth.verify(answer(challenge, uri="sip:192.0.2.1"), "INVITE", "sip:agent@192.0.2.1").status == "ok"
    # ...another host is not.
    other = auth.verify(answer(challenge, uri="sip:agent@203.0.113.5"), "INVITE", "sip:agent@192.0.2.1")
    assert other.status == "invalid"


def test_garbage_authorization_is_invalid_not_an_exception() -> None:
    auth = authenticator(Clock())
    for value in ["", "Basic abc", "Digest", 'Digest username="a', "Digest a=b=c", 'Digest qop="auth-int"']:
        assert auth.verify(value, "INVITE", "sip:x@y").status == "invalid"


def test_client_answers_qop_auth_with_cnonce_and_nc() -> None:
    challenge = 'Digest realm="example", nonce="abc", opaque="op", qop="auth,auth-int", algorithm=MD5'
    value = authorization_header(challenge, method="INVITE", uri="sip:a@b", username="u", password="p",
                                 cnonce="c0ffee", nc=2)
    params = parse_digest(value)
    assert params["qop"] == "auth" and params["nc"] == "00000002" and params["cnonce"] == "c0ffee"
    assert params["opaque"] == "op"
    ha1, ha2 = md5("u:example:p"), md5("INVITE:sip:a@b")
    assert params["response"] == md5(f"{ha1}:abc:00000002:c0ffee:auth:{ha2}")


def test_client_answers_a_challenge_without_qop() -> None:
    value = authorization_header('Digest realm="r", nonce="n"', method="BYE", uri="sip:a@b", username="u", password="p")
    params = parse_digest(value)
    assert "qop" not in params and params["response"] == md5(f"{md5('u:r:p')}:n:{md5('BYE:sip:a@b')}")


def test_choose_challenge_prefers_sha256_and_skips_unusable() -> None:
    chosen = choose_challenge([
        'Digest realm="r", nonce="1", algorithm=MD5',
        'Digest realm="r", nonce="2", algorithm=SHA-512-256',
        'Digest realm="r", nonce="3", algorithm=SHA-256, qop="auth"',
    ])
    assert chosen["nonce"] == "3"
    with pytest.raises(DigestError):
        choose_challenge(['Basic realm="r"', 'Digest realm="r", nonce="1", qop="auth-int"'])
