"""One build step pyproject.toml cannot express: the wheel records the git revision it was built from.

Everything else about the package (name, the version, dependencies, package data) is in pyproject.toml.
voicegate.server.version reads the file back at run time; it is loaded here by path, because importing the
`server` package would import the whole server.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent


def _version_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("voicegate_build_version", SOURCE / "voicegate" / "server" / "version.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithRevision(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install is a checkout: voicegate/server/version.py asks git itself, live
        version = _version_module()
        revision = os.environ.get(version.BUILD_REVISION_ENV, "").strip() or version.git_revision(SOURCE)
        stamp = Path(self.build_lib) / "voicegate" / "server" / version.REVISION_FILE
        if revision:
            stamp.write_text(revision + "\n", encoding="utf-8")
        else:  # a build directory reused from an earlier build must not keep that build's revision
            stamp.unlink(missing_ok=True)


setup(cmdclass={"build_py": BuildPyWithRevision})
