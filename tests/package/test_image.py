"""The container image: the Dockerfile builds the wheel, installs it, and `voicegate doctor` runs inside.

Building an image needs a container engine (docker, else podman). Where none answers, these tests are
skipped and say why; this development machine has the docker CLI but no engine behind it. The compose
file and the Dockerfile's shape are checked everywhere (tests/test_packaging.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import REPO
from tests.package.wheel import checkout_revision, project_version

pytestmark = pytest.mark.slow

ENGINES = ("docker", "podman")
BUILD_TIMEOUT_S = 3600  # the dependencies (about 900 MB) into a fresh image, on two shared cores
RUN_TIMEOUT_S = 300


def container_engine() -> str:
    """The first engine whose `info` answers; else the test is skipped with each engine's reason."""
    reasons = []
    for engine in ENGINES:
        if shutil.which(engine) is None:
            reasons.append(f"{engine}: not installed")
            continue
        done = subprocess.run([engine, "info"], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode == 0:
            return engine
        said = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        reasons.append(f"`{engine} info` failed: {said[:200]}")
    pytest.skip("no container engine to build the image with (" + "; ".join(reasons) + ")")


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[str, str, str]]:
    """(engine, tag, revision) of an image built from this tree, removed afterwards."""
    engine = container_engine()
    tag = f"voicegate-test:{os.getpid()}-{os.urandom(3).hex()}"
    revision = checkout_revision()
    built = subprocess.run([engine, "build", "--build-arg", f"VOICEGATE_BUILD_REVISION={revision}", "-t", tag,
                            str(REPO)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert built.returncode == 0, f"{engine} build failed:\n{built.stdout[-4000:]}\n{built.stderr[-4000:]}"
    try:
        yield engine, tag, revision
    finally:
        subprocess.run([engine, "rmi", "-f", tag], capture_output=True, timeout=RUN_TIMEOUT_S, check=False)


def run(image: tuple[str, str, str], *args: str, entrypoint: str = "") -> subprocess.CompletedProcess[str]:
    engine, tag, _ = image
    command = [engine, "run", "--rm", *(["--entrypoint", entrypoint] if entrypoint else []), tag, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


def test_the_image_is_the_wheel_of_this_revision(image: tuple[str, str, str]) -> None:
    version = run(image, "--version")
    assert version.stdout == f"voicegate {project_version()} (git {image[2]})\n", version
    assert run(image, "-u", entrypoint="id").stdout.strip() != "0"  # never root
    # Installed into site-packages from the wheel, under its one name: no source tree was copied into the
    # image, and no `server` or `internal` of the checkout's links is importable there.
    probe = ("import os, importlib.util as u, voicegate.server as s; print(s.__file__); "
             "print(os.path.exists('/src'), u.find_spec('server') is None and u.find_spec('internal') is None)")
    listing = run(image, "-c", probe, entrypoint="python")
    assert listing.stdout.split() == ["/usr/local/lib/python3.11/site-packages/voicegate/server/__init__.py",
                                      "False", "True"], listing


def test_doctor_in_the_image_finds_everything_the_default_config_needs(image: tuple[str, str, str]) -> None:
    doctor = run(image, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert doctor.stdout.rstrip().endswith(": ready"), doctor.stdout
    assert "ok   package: voicegate" in doctor.stdout and "installed in /usr/local/lib" in doctor.stdout
    assert "ok   model smart turn: " in doctor.stdout  # fetched and checked while the image was built
