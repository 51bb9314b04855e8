"""Registration over TLS with a real registrar: Kamailio (tls.so, registrar, digest auth) on a TLS-only
port. voicegate checks the registrar's certificate against `sip.tls_ca`, registers, takes the calls the
PBX sends to its binding over TLS, and removes the binding at shutdown; a registrar whose certificate
does not chain to that CA is never sent the account."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.common.cluster import stop_process, wait_until
from tests.pipeline.conftest import ScriptedStt
from tests.sip.certs import ThrowawayCa
from tests.sip.conftest import run_sipp
from tests.sip_calls.conftest import ServerFactory, caller_bye, eventually, free_port, render, sip_calls_config
from voicegate.internal.config.sip_registration import SipRegistration

pytestmark = pytest.mark.slow

KAMAILIO = shutil.which("kamailio") or "/usr/sbin/kamailio"
REGISTRAR_CFG = Path(__file__).parent / "kamailio" / "registrar_tls.cfg"
TLS_MODULE = Path("/usr/lib/x86_64-linux-gnu/kamailio/modules/tls.so")
PASSWORD = "tls-registrar-s3cret"
USERNAME = "agent"  # the user the sipp scenarios dial


@pytest.fixture(autouse=True)
def _kamailio_tls_installed() -> None:
    # Not a skip: `make test` installs them, so their absence is a broken set-up, not a reason to pass.
    assert Path(KAMAILIO).exists(), "kamailio is not installed (make test installs it)"
    assert TLS_MODULE.exists(), "Kamailio's tls.so is missing (apt: kamailio-tls-modules; make test installs it)"


@dataclass
class TlsRegistrar:
    port: int  # TLS: where voicegate registers
    phones: int  # UDP: where the PBX's phones (sipp) call from
    log: Path

    def bindings(self) -> list[str]:
        """The registrar's own record of each binding it saved ("binding alice over tls expires=...")."""
        return [line.split("binding ", 1)[1] for line in self.log.read_text(errors="replace").splitlines()
                if "binding " in line]


def accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def tls_registrar(directory: Path, ca: ThrowawayCa) -> Iterator[TlsRegistrar]:
    """Kamailio on a TLS-only port with a certificate `ca` issued for 127.0.0.1."""
    directory.mkdir(parents=True)
    leaf = ca.issue("registrar")
    tls_cfg = directory / "tls.cfg"
    tls_cfg.write_text(f"[server:default]\nmethod = TLSv1.2+\nverify_certificate = no\nrequire_certificate = no\n"
                       f"certificate = {leaf.cert}\nprivate_key = {leaf.key}\n")
    port = free_port()
    registrar = TlsRegistrar(port, free_port(), directory / "kamailio.log")
    rundir = directory / "run"
    rundir.mkdir()
    args = [KAMAILIO, "-f", str(REGISTRAR_CFG), "-DD", "-E", "-Y", str(rundir), "-P", str(rundir / "kamailio.pid"),
            "-A", f"LISTEN=tls:127.0.0.1:{port}", "-A", f"PHONES=udp:127.0.0.1:{registrar.phones}",
            "-A", f'TLS_CFG="{tls_cfg}"', "-A", f'PASSWORD="{PASSWORD}"']
    with registrar.log.open("ab") as out:
        proc = subprocess.Popen(args, cwd=directory, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: accepts(port), "kamailio listening for TLS", 10, proc, registrar.log)
        yield registrar
    finally:
        stop_process(proc, 10)


def registering_config(tmp_path: Path, ca: ThrowawayCa, registrar: TlsRegistrar):  # type: ignore[no-untyped-def]
    leaf = ca.issue("voicegate")
    config = sip_calls_config(tmp_path)
    config.sip.tls_cert, config.sip.tls_key, config.sip.tls_ca = str(leaf.cert), str(leaf.key), str(ca.cert)
    config.sip.tls_bind = f"127.0.0.1:{free_port()}"
    config.sip.transports = ["udp", "tls"]
    config.sip.registrations = [SipRegistration(registrar=f"sip:127.0.0.1:{registrar.port};transport=tls",
                                                username=USERNAME, password=PASSWORD)]
    return config


async def test_registration_over_tls_checks_the_registrar_registers_and_unregisters_at_shutdown(
        make_server: ServerFactory, tmp_path: Path) -> None:
    ca = ThrowawayCa(tmp_path / "ca")
    with tls_registrar(tmp_path / "registrar", ca) as registrar:
        server = await make_server(config=registering_config(tmp_path, ca, registrar))
        assert server.gateway.sip is not None
        (status,) = server.gateway.sip.registrations.statuses()
        await eventually(lambda: status.state == "registered", 30, "registered over TLS")
        (binding,) = registrar.bindings()
        assert binding.startswith(f"{USERNAME} over tls expires=3600"), binding
        metrics = server.gateway.telemetry.prometheus()
        assert 'voicegate_sip_registration_up{registrar="sip:127.0.0.1:' in metrics
        await server.gateway.stop()  # shutdown removes the binding (Expires: 0) over the same TLS transport
        await eventually(lambda: len(registrar.bindings()) == 2, 15, "the un-REGISTER")
        assert registrar.bindings()[1].startswith(f"{USERNAME} over tls expires=0"), registrar.bindings()


async def test_a_registrar_whose_certificate_does_not_chain_to_tls_ca_gets_no_register(
        make_server: ServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ours, other = ThrowawayCa(tmp_path / "ca"), ThrowawayCa(tmp_path / "other-ca", name="someone else's CA")
    with tls_registrar(tmp_path / "registrar", other) as registrar:
        server = await make_server(config=registering_config(tmp_path, ours, registrar))
        assert server.gateway.sip is not None
        (status,) = server.gateway.sip.registrations.statuses()
        await eventually(lambda: status.failures >= 1, 30, "the failed attempt")
        assert status.state != "registered" and "CERTIFICATE_VERIFY_FAILED" in status.last_reason, status
        errors = [str(getattr(r, "sip_error", "")) for r in caplog.records if r.getMessage() == "sip connect failed"]
        assert any("CERTIFICATE_VERIFY_FAILED" in error for error in errors), errors  # the log says why
        assert registrar.bindings() == []  # the handshake failed before any REGISTER was sent


async def test_a_call_the_pbx_sends_to_the_tls_binding_is_answered_and_trusted(
        make_server: ServerFactory, tmp_path: Path) -> None:
    ca = ThrowawayCa(tmp_path / "ca")
    with tls_registrar(tmp_path / "registrar", ca) as registrar:
        server = await make_server(config=registering_config(tmp_path, ca, registrar), stt=ScriptedStt([]))
        assert server.gateway.sip is not None
        (status,) = server.gateway.sip.registrations.statuses()
        await eventually(lambda: status.state == "registered", 30, "registered over TLS")
        # A phone on the PBX dials the user we registered: the PBX finds our binding and relays over TLS.
        caller = tmp_path / "caller"
        caller.mkdir()
        scenario = render(caller, ending=caller_bye(1000))
        # The PBX record-routes: the caller's ACK and BYE carry the route set (sipp's [routes]).
        text = scenario.read_text()
        for cseq in ("CSeq: 1 ACK\n", "CSeq: 10 BYE\n"):
            text = text.replace(cseq, cseq + "      [routes]\n")
        scenario.write_text(text)
        (await run_sipp(caller, scenario, f"127.0.0.1:{registrar.phones}")).check()
        (session,) = await server.wait_ended()
    assert any(f"relaying INVITE for {USERNAME}" in line for line in registrar.log.read_text().splitlines())
    assert session.identity.reason.startswith("trusted peer"), session.identity  # the registrar vouches for it
    assert session.identity.kind == "sip" and session.end_reason == "sip bye"
