"""The container files, checked everywhere (building and running the image needs an engine:
tests/package/test_image.py). The Dockerfile builds the wheel and installs it, copies only paths that
exist, runs as a non-root user and has a health check; the compose file parses, every build context,
image, mount and port it names exists and agrees with the configurations it runs (deploy/, the node
defaults), and it describes the tested cluster (docs/scaling.md); `docker compose config` accepts it
where the compose plugin is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest

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


def test_the_image_is_the_wheel_installed_and_nothing_of_the_tree() -> None:
    text = (REPO / "Dockerfile").read_text()
    build, _, image = text.partition("\nFROM python:3.11-slim\n")  # the second stage: the image itself
    assert image, "the Dockerfile has no second stage"
    assert re.search(r"^FROM python:3\.11-slim AS wheel$", build, re.MULTILINE)
    assert "pip wheel" in build and "--no-deps" in build and "VOICEGATE_BUILD_REVISION" in build
    copies = re.findall(r"^COPY\s+(.+)$", image, re.MULTILINE)
    assert copies == ["--from=wheel /wheels /tmp/wheels"]  # no source, config or migrations copied beside it
    assert re.search(r"pip install /tmp/wheels/voicegate-\*\.whl", image)


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
    from voicegate.internal.config import Config

    server = Config().server
    for node in nodes:
        assert int(node["stop_grace_period"].rstrip("s")) > server.drain_timeout_s + server.shutdown_timeout_s


def _published(ports: list[str]) -> list[tuple[str, str, str]]:
    """("host", "container", "protocol") of each `HOST:CONTAINER[/proto]` entry."""
    found = []
    for entry in ports:
        mapping, _, protocol = str(entry).partition("/")
        host, _, container = mapping.rpartition(":")
        found.append((host, container, protocol or "tcp"))
    return found


def test_compose_names_only_things_that_exist() -> None:
    compose = _compose()
    services = compose["services"]
    for name, service in services.items():
        assert ("build" in service) != ("image" in service), f"{name}: a build context or an image, one of them"
        if "build" in service:
            build = service["build"]
            context = REPO / (build if isinstance(build, str) else build["context"])
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            assert (context / dockerfile).is_file(), f"{name}: no {dockerfile} in {context}"
        else:
            image = service["image"]
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image's tag ({image})"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in compose.get("volumes", {}), f"{name}: volume {source} is not declared"
        depends = service.get("depends_on", [])
        assert set(depends) <= set(services), f"{name} depends on a service that is not there"
        assert set(service.get("networks", {})) <= set(compose["networks"])


def test_compose_ports_agree_with_the_configurations_the_containers_run() -> None:
    from voicegate.internal.config import Config

    services = _compose()["services"]
    defaults = Config()
    dockerfile = (REPO / "Dockerfile").read_text()
    (expose,) = re.findall(r"^EXPOSE (.+)$", dockerfile, re.MULTILINE)
    exposed = expose.split()
    # HAProxy publishes the port it binds, and reaches each node on the node's HTTP port.
    haproxy = services["haproxy"]["environment"]
    [(_, published, _)] = _published(services["haproxy"]["ports"])
    assert haproxy["VG_HTTP_BIND"].rsplit(":", 1)[1] == published
    nodes = {name: service for name, service in services.items() if name.startswith("voicegate")}
    for name, node in nodes.items():
        env = node["environment"]
        http = int(env.get("VOICEGATE_SERVER__PORT", defaults.server.port))
        sip = int(env.get("VOICEGATE_SIP__BIND", defaults.sip.bind).rsplit(":", 1)[1])
        assert f"{_address(node)}:{http}" in (haproxy["VG_NODE_A"], haproxy["VG_NODE_B"]), name
        assert str(http) in exposed and f"{sip}/udp" in exposed, f"the image does not expose {name}'s ports"
        # Kamailio dispatches to the node's SIP port.
        listing = (REPO / services["kamailio"]["volumes"][0].split(":")[0]).read_text()
        assert f"sip:{_address(node)}:{sip}" in listing, name
        # Each node publishes exactly its RTP range, host and container alike, inside what the image exposes.
        low, high = int(env["VOICEGATE_SIP__RTP_PORT_MIN"]), int(env["VOICEGATE_SIP__RTP_PORT_MAX"])
        assert _published(node["ports"]) == [(f"{low}-{high}", f"{low}-{high}", "udp")], name
        image_low, image_high = next(p for p in exposed if "-" in p).removesuffix("/udp").split("-")
        assert int(image_low) <= low and high <= int(image_high), name
    # Kamailio publishes the SIP port it listens on.
    listen = next(arg for arg in services["kamailio"]["command"] if arg.startswith("LISTEN="))
    assert [(p[1], p[2]) for p in _published(services["kamailio"]["ports"])] == [(listen.rsplit(":", 1)[1], "udp")]


def _compose_command() -> list[str]:
    for command in (["docker", "compose"], ["docker-compose"], ["podman", "compose"]):
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=60, check=False)
        if probe.returncode == 0:
            return command
    pytest.skip("no compose implementation to ask (docker compose, docker-compose, podman compose): "
                "the checks above are all that run here")


def test_docker_compose_accepts_the_file() -> None:
    command = _compose_command()
    done = subprocess.run([*command, "-f", str(REPO / "docker-compose.yml"), "config", "--quiet"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr
