"""What cannot be built here (no Docker engine) is checked as far as it can be: the Dockerfile copies
only paths that exist, runs as a non-root user, has a health check, and the compose file parses and
describes the tested cluster (docs/scaling.md) consistently."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.conftest import REPO


def test_dockerfile_copies_existing_paths_and_runs_unprivileged() -> None:
    text = (REPO / "Dockerfile").read_text()
    sources = []
    for line in text.splitlines():
        match = re.match(r"^COPY\s+(?!--from)(.+?)\s+\S+$", line.strip())
        if match:
            sources += match.group(1).split()
    assert sources, "no COPY lines found"
    for source in sources:
        assert (REPO / source).exists(), f"the Dockerfile copies {source}, which does not exist"
    assert re.search(r"^USER\s+(?!root)\w+", text, re.MULTILINE)
    assert "HEALTHCHECK" in text and "/health" in text
    assert re.search(r"^FROM python:3\.11-slim", text, re.MULTILINE)


def test_compose_file_is_valid_yaml_with_shared_secrets() -> None:
    import yaml  # PyYAML ships with the test tools (schemathesis needs it)

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    nodes = [name for name in compose["services"] if name.startswith("voicegate")]
    assert len(nodes) == 2
    secrets = {compose["services"][n]["environment"]["VOICEGATE_MEMORY__OWNER_KEY_SECRET"] for n in nodes}
    assert len(secrets) == 1  # nodes must derive the same owner keys


def _compose() -> dict[str, Any]:
    import yaml

    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def _address(service: dict[str, Any]) -> str:
    return str(service["networks"]["voicegate"]["ipv4_address"])


def test_compose_puts_kamailio_and_haproxy_in_front_with_the_tested_configurations() -> None:
    services = _compose()["services"]
    assert {"postgres", "voicegate-a", "voicegate-b", "kamailio", "haproxy"} <= set(services)
    nodes = [services["voicegate-a"], services["voicegate-b"]]
    for front, config in (("kamailio", "kamailio.cfg"), ("haproxy", "haproxy.cfg")):
        dockerfile = (REPO / services[front]["build"] / "Dockerfile").read_text()
        assert re.search(rf"^COPY {re.escape(config)} ", dockerfile, re.MULTILINE), front
        assert (REPO / services[front]["build"] / config).exists()
    # Kamailio dispatches to exactly the nodes' addresses, and the nodes trust Kamailio alone.
    (mount,) = services["kamailio"]["volumes"]
    listing = (REPO / mount.split(":")[0]).read_text()
    targets = re.findall(r"^1 sip:([0-9.]+):5060$", listing, re.MULTILINE)
    assert sorted(targets) == sorted(_address(node) for node in nodes)
    assert f"LISTEN=udp:{_address(services['kamailio'])}:5060" in services["kamailio"]["command"]
    for node in nodes:
        env = node["environment"]
        assert json.loads(env["VOICEGATE_SIP__TRUSTED_PEERS"]) == [f"{_address(services['kamailio'])}/32"]
        assert json.loads(env["VOICEGATE_SERVER__TRUSTED_PROXIES"]) == [f"{_address(services['haproxy'])}/32"]
        assert "ports" not in node or all("8080" not in str(p) and "5060" not in str(p) for p in node["ports"])
    # HAProxy balances the nodes' HTTP ports; each node has a node id, its own RTP range, and time to drain.
    haproxy = services["haproxy"]["environment"]
    assert sorted([haproxy["VG_NODE_A"], haproxy["VG_NODE_B"]]) == sorted(f"{_address(n)}:8080" for n in nodes)
    assert len({node["environment"]["VOICEGATE_SERVER__NODE_ID"] for node in nodes}) == 2
    (a_min, a_max), (b_min, b_max) = [(int(n["environment"]["VOICEGATE_SIP__RTP_PORT_MIN"]),
                                       int(n["environment"]["VOICEGATE_SIP__RTP_PORT_MAX"])) for n in nodes]
    assert a_max < b_min or b_max < a_min
    from internal.config import Config

    server = Config().server
    for node in nodes:
        assert int(node["stop_grace_period"].rstrip("s")) > server.drain_timeout_s + server.shutdown_timeout_s
