"""`voicegate --version` and /health name the package version (pyproject.toml's, the one place it is
written) and the git revision: live from a checkout, stamped into a wheel (tests/package)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.package.wheel import project_version
from voicegate.server.version import git_revision, package_version


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_installed_metadata_carries_pyprojects_version() -> None:
    assert package_version() == project_version()


def test_version_from_a_checkout_names_its_head_and_whether_tracked_files_differ(tmp_path: Path) -> None:
    head = git(REPO, "rev-parse", "--short=12", "HEAD")
    dirty = bool(git(REPO, "status", "--porcelain", "--untracked-files=no"))
    done = run_cli("--version", cwd=tmp_path)  # from anywhere: the code's checkout counts, not the cwd
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"voicegate {project_version()} (git {head}{'-dirty' if dirty else ''})\n"


def test_git_revision_is_head_then_dirty_once_a_tracked_file_changes(tmp_path: Path) -> None:
    assert git_revision(tmp_path) is None  # not a repository: no revision rather than a guess
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "--short=12", "HEAD")
    (tmp_path / "new.txt").write_text("untracked files do not count\n")
    assert git_revision(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert git_revision(tmp_path) == f"{head}-dirty"
