"""One build step pyproject.toml cannot express: the wheel records the git revision it was built from.

Everything else about the package (name, the version, dependencies, package data) is in pyproject.toml,
and what the sdist holds beyond setuptools' defaults in MANIFEST.in. voicegate.server.version reads the
revision back at run time; it is loaded here by path, so the build imports nothing else of voicegate.

The revision travels through the sdist: `python -m build` makes the sdist in the checkout (git answers
there) and then the wheel from the unpacked sdist, which has no .git; so the sdist carries the stamp the
wheel is then given.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

SOURCE = Path(__file__).resolve().parent


def _version_module() -> ModuleType:
    path = SOURCE / "voicegate" / "server" / "version.py"
    spec = importlib.util.spec_from_file_location("voicegate_build_version", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _revision(version: ModuleType) -> str | None:
    """$VOICEGATE_BUILD_REVISION (a build without .git: Docker), else git where this is a checkout, else the
    stamp of the sdist this is, else None.

    Only a .git right here counts: an sdist unpacked inside some other repository must not take its HEAD.
    """
    given = os.environ.get(version.BUILD_REVISION_ENV, "").strip()
    if given:
        return given
    if (SOURCE / ".git").exists():
        return version.git_revision(SOURCE)
    stamp = SOURCE / "voicegate" / "server" / version.REVISION_FILE
    return (stamp.read_text(encoding="utf-8").strip() or None) if stamp.is_file() else None


def _stamp(path: Path, revision: str | None) -> None:
    path.unlink(missing_ok=True)  # a build directory's earlier stamp, or a hard link into the source tree
    if revision:
        path.write_text(revision + "\n", encoding="utf-8")


class SdistWithRevision(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        version = _version_module()
        _stamp(Path(base_dir) / "voicegate" / "server" / version.REVISION_FILE, _revision(version))


class BuildPyWithRevision(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install is a checkout: voicegate/server/version.py asks git itself, live
        version = _version_module()
        _stamp(Path(self.build_lib) / "voicegate" / "server" / version.REVISION_FILE, _revision(version))


setup(cmdclass={"build_py": BuildPyWithRevision, "sdist": SdistWithRevision})
