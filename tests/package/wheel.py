"""voicegate as a user gets it: the sdist and the wheel that `python -m build` makes from this tree's files
(the wheel built from the sdist, as the standard build does), installed into a virtualenv of its own
outside the tree.

They are built from a copy of the files git would commit (tracked, or new and not ignored), so nothing a
developer's checkout accumulates (.venv, data/, build/, caches) can slip into them, and the checkout itself
is never written to. The copy has no .git, so the build is given the checkout's revision the way a Docker
build is (VOICEGATE_BUILD_REVISION, read by setup.py, which stamps it into the sdist too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from voicegate.server.version import BUILD_REVISION_ENV, git_revision

BUILD_TIMEOUT_S = 300  # two isolated build environments (sdist, then the wheel), setuptools fetched into each
INSTALL_TIMEOUT_S = 900  # the dependencies (about 900 MB unpacked), from pip's cache when it has them


def project_version() -> str:
    """`[project] version` of pyproject.toml: the one place the version is written."""
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def checkout_revision() -> str:
    revision = git_revision(REPO)
    assert revision, f"{REPO} is not a git checkout git can read"
    return revision


def committable_files() -> list[str]:
    """Paths (relative to the repository) of the files a commit would hold now."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted(path for path in listed if path and os.path.lexists(REPO / path))


def copy_tree(destination: Path) -> Path:
    for relative in committable_files():
        source, target = REPO / relative, destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # ./config.toml is a link into the package: kept a link, as git keeps it
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return destination


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    revision: str
    sdist: Path  # the source distribution the wheel was built from

    def sdist_names(self) -> set[str]:
        """The sdist's files, relative to its top folder (voicegate-VERSION/)."""
        with tarfile.open(self.sdist) as archive:
            return {member.name.split("/", 1)[1] for member in archive.getmembers()
                    if member.isfile() and "/" in member.name}

    def sdist_read(self, name: str) -> str:
        with tarfile.open(self.sdist) as archive:
            member = archive.extractfile(f"voicegate-{project_version()}/{name}")
            assert member is not None, name
            return member.read().decode()

    def names(self) -> set[str]:
        with zipfile.ZipFile(self.path) as archive:
            return set(archive.namelist())

    def read(self, name: str) -> str:
        with zipfile.ZipFile(self.path) as archive:
            return archive.read(name).decode()


def build_wheel(scratch: Path) -> BuiltWheel:
    """`python -m build` of a copy of this tree: the sdist, then the wheel built from the unpacked sdist (so
    the wheel proves the sdist complete). One build serves both the wheel's tests and the sdist's."""
    source = copy_tree(scratch / "source")
    out = scratch / "dist"
    revision = checkout_revision()
    env = {**os.environ, BUILD_REVISION_ENV: revision}
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], capture_output=True,
                          text=True, env=env, cwd=scratch, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (wheel,) = out.glob("voicegate-*.whl")
    (sdist,) = out.glob("voicegate-*.tar.gz")
    return BuiltWheel(wheel, revision, sdist)


def outside_env(home: Path, *drop: str) -> dict[str, str]:
    """The environment of a person's shell: no PYTHONPATH or VOICEGATE_* of the test run, a HOME of its
    own (so no model cached under the developer's ~/.cache is found), pip's cache where it was."""
    cache = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("VOICEGATE_") and name not in ("PYTHONPATH", "VIRTUAL_ENV", *drop)}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    if cache.strip():
        env["PIP_CACHE_DIR"] = cache.strip()
    return env


def install(wheel: Path, venv: Path, env: dict[str, str]) -> Path:
    """A fresh virtualenv at `venv` with the wheel and its dependencies; its bin directory."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                           "--progress-bar", "off", str(wheel)], capture_output=True, text=True, env=env,
                          cwd=venv, timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, f"pip install failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return venv / "bin"
