"""What cannot be built here (no Docker engine) is checked as far as it can be: the Dockerfile copies
only paths that exist, runs as a non-root user, has a health check, and the compose file parses."""

from __future__ import annotations

import re

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
