"""Which voicegate this is: the package version, and the git revision it was built from when known.

The version has one source, `[project] version` in pyproject.toml, read back from the installed
package's metadata. The revision comes from one of two places, decided by how voicegate runs:
- from a checkout (an editable install, `make serve`): git, asked at run time, so it follows every
  commit and says `-dirty` when tracked files differ from it;
- from an installed wheel: the file REVISION_FILE, which setup.py writes into the wheel and the sdist when
  it builds from a checkout (or from $VOICEGATE_BUILD_REVISION, for builds that have no .git, such as a
  Docker build context); a wheel built from an sdist takes the sdist's. A build with none of these knows no
  revision, and says nothing rather than guess.

This module imports nothing of voicegate's, so setup.py can load it on its own at build time.
"""

from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path

REVISION_FILE = "REVISION"
BUILD_REVISION_ENV = "VOICEGATE_BUILD_REVISION"
GIT_TIMEOUT_S = 5.0


def package_version() -> str:
    try:
        return version("voicegate")
    except PackageNotFoundError:
        return "0+unknown"


def checkout_root() -> Path | None:
    """The voicegate checkout this code runs from, or None for an installed package.

    Only the directory right above `voicegate/` counts: a wheel installed into a virtualenv that happens to
    live inside some other git repository must not report that repository's revision.
    """
    root = Path(__file__).resolve().parents[2]
    return root if (root / ".git").exists() and (root / "pyproject.toml").is_file() else None


def git_revision(root: Path) -> str | None:
    """HEAD of the git work tree at `root` (12 hex digits), `-dirty` when a tracked file differs from it."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):  # no git on this machine, or a hung file system
        return None
    dirty = status.returncode == 0 and bool(status.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


@lru_cache(maxsize=1)
def source_revision() -> str | None:
    """The git revision of this code: live from a checkout, else as stamped into the wheel, else None."""
    root = checkout_root()
    if root is not None:
        return git_revision(root)
    stamp = files("voicegate.server") / REVISION_FILE
    try:
        return stamp.read_text(encoding="utf-8").strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def version_label() -> str:
    """`0.1.0`, or `0.1.0 (git 0bded57a1b2c)` when the revision is known."""
    revision = source_revision()
    return package_version() + (f" (git {revision})" if revision else "")
