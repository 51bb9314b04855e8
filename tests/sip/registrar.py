"""sipp as a registrar: scenarios built round by round, since each test needs its own sequence.

A round answers one REGISTER exchange: 401 with an MD5 qop=auth challenge, then sipp's own
`verifyauth` checks our Authorization against the password it was given, and answers 200 (granting
`grant` seconds) when it is right, 403 when it is wrong. sipp 3.6.1 verifies MD5 only.
"""

from __future__ import annotations

from pathlib import Path

REALM = "registrar.test"
HEAD = """<?xml version="1.0" encoding="ISO-8859-1" ?>
<!DOCTYPE scenario SYSTEM "sipp.dtd">
<scenario name="registrar">
"""

_REPLY_HEADERS = """[last_Via:]
      [last_From:]
      [last_To:];tag=[pid]SIPpTag01[call_number]
      [last_Call-ID:]
      [last_CSeq:]"""


def _reply(status: str, extra: str = "") -> str:
    extra_line = f"\n      {extra}" if extra else ""
    return f"""  <send>
    <![CDATA[

      SIP/2.0 {status}
      {_REPLY_HEADERS}{extra_line}
      Content-Length: 0

    ]]>
  </send>
"""


def _recv_register(checks: list[tuple[str, str]], verify_password: str | None = None, n: int = 0) -> str:
    """A REGISTER whose headers match `checks` ((header, regexp), the scenario fails otherwise)."""
    actions = [
        f'      <ereg regexp="{regexp}" search_in="hdr" header="{header}:" check_it="true" assign_to="chk{n}_{i}"/>'
        for i, (header, regexp) in enumerate(checks)
    ]
    if verify_password is not None:
        actions.append(f'      <verifyauth assign_to="authvalid{n}" username="alice" password="{verify_password}"/>')
    body = "\n".join(actions)
    # ereg results are only there to fail the scenario; sipp insists every variable is used.
    names = ",".join(f"chk{n}_{i}" for i in range(len(checks)))
    uses = f'  <Reference variables="{names}"/>\n' if checks else ""
    return f'  <recv request="REGISTER">\n    <action>\n{body}\n    </action>\n  </recv>\n{uses}'


def challenge_round(n: int, password: str, *, grant: int, expires: str = "[0-9]+") -> str:
    """REGISTER -> 401, REGISTER with credentials -> 200 (Expires: grant) or 403."""
    nonce = f"nonce-[pid]-{n}"
    challenge = f'WWW-Authenticate: Digest realm="{REALM}", nonce="{nonce}", qop="auth", algorithm=MD5'
    return (
        _recv_register([("Expires", f"^ *{expires} *$")], n=2 * n)
        + _reply("401 Unauthorized", challenge)
        + _recv_register([("Authorization", "Digest .*qop=auth"), ("Expires", f"^ *{expires} *$")],
                         password, n=2 * n + 1)
        + f'  <nop hide="true" test="authvalid{2 * n + 1}" next="ok{n}"/>\n'
        + _reply("403 Forbidden")
        + f'  <nop hide="true" next="done{n}"/>\n'
        + f'  <label id="ok{n}"/>\n'
        + _reply("200 OK", f"[last_Contact:];expires={grant}\n      Expires: {grant}")
        + f'  <label id="done{n}"/>\n'
    )


def too_brief_round(n: int, min_expires: int) -> str:
    """REGISTER -> 423 Interval Too Brief with Min-Expires."""
    return _recv_register([("Expires", "^ *[0-9]+ *$")], n=2 * n) + _reply(
        "423 Interval Too Brief", f"Min-Expires: {min_expires}")


def write_scenario(tmp_path: Path, rounds: list[str]) -> Path:
    path = tmp_path / "registrar.xml"
    path.write_text(HEAD + "".join(rounds) + "</scenario>\n")
    return path
