"""The sdist and the wheel built from it carry everything the server reads at run time, and the repository
keeps one copy of each runtime file, inside the package."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO
from tests.package.wheel import BuiltWheel, committable_files, project_version

pytestmark = pytest.mark.xdist_group("wheel")  # one worker builds the wheel its tests share

# The design's top-level names: links at the checkout's root into the one import package, for readers.
LINKS = {"internal": "voicegate/internal", "server": "voicegate/server", "migrations": "voicegate/migrations",
         "config.toml": "voicegate/internal/config/config.toml"}
PACKAGED_DATA = {"voicegate/internal/config/config.toml", "voicegate/internal/pipeline/PROMPT.md",
                 "voicegate/internal/web/static/index.html", "voicegate/migrations/0001_init.sql",
                 "voicegate/internal/turn/fusion_weights.json"}


def package_files() -> set[str]:
    return {path for path in committable_files() if path.startswith("voicegate/")}


def test_the_wheel_holds_every_file_of_the_packages_and_nothing_of_the_checkout(built_wheel: BuiltWheel) -> None:
    assert built_wheel.path.name == f"voicegate-{project_version()}-py3-none-any.whl"
    names = built_wheel.names()
    wanted = package_files()
    assert sorted(wanted - names) == []  # SQL, the default config, PROMPT.md, the page, the turn weights, code
    data = {name for name in names if not name.endswith(".py") and ".dist-info/" not in name}
    assert PACKAGED_DATA <= data
    # Beside the packages' files only what the build adds: its metadata and the revision stamp.
    extra = {name for name in names - wanted if ".dist-info/" not in name}
    assert extra == {"voicegate/server/REVISION"}
    assert built_wheel.read("voicegate/server/REVISION").strip() == built_wheel.revision


def test_the_sdist_holds_the_build_files_and_every_file_of_the_package(built_wheel: BuiltWheel) -> None:
    """What `pip install voicegate-X.tar.gz` (and `python -m build`'s wheel) is built from."""
    assert built_wheel.sdist.name == f"voicegate-{project_version()}.tar.gz"
    names = built_wheel.sdist_names()
    build_files = {"setup.py", "pyproject.toml", "README.md", "MANIFEST.in"}
    assert sorted((build_files | package_files()) - names) == []
    assert PACKAGED_DATA <= names
    # Nothing else of the checkout (no tests, docs, root links, caches): the build's metadata and the stamp.
    extra = {name for name in names - build_files - package_files()
             if not name.startswith("voicegate.egg-info/")}
    assert extra == {"PKG-INFO", "setup.cfg", "voicegate/server/REVISION"}
    # The wheel built from the unpacked sdist (no .git there) takes its revision from this stamp.
    assert built_wheel.sdist_read("voicegate/server/REVISION").strip() == built_wheel.revision


def test_the_wheels_only_top_level_import_package_is_voicegate(built_wheel: BuiltWheel) -> None:
    """Two distributions that ship the same top-level name overwrite each other silently: ours is one name."""
    names = built_wheel.names()
    (top_level,) = [name for name in names if name.endswith(".dist-info/top_level.txt")]
    assert built_wheel.read(top_level).split() == ["voicegate"]
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"voicegate"}
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    assert "voicegate = voicegate.server.cli:main" in built_wheel.read(entry_points)


def test_the_packaged_default_config_is_the_checkouts_config_toml(built_wheel: BuiltWheel) -> None:
    packaged = (REPO / "voicegate" / "internal" / "config" / "config.toml").read_text()
    assert built_wheel.read("voicegate/internal/config/config.toml") == packaged
    assert built_wheel.sdist_read("voicegate/internal/config/config.toml") == packaged


def test_the_repository_keeps_one_copy_of_each_runtime_file() -> None:
    files = committable_files()
    # The code and its data live in real folders of the package: no link inside voicegate/, so a checkout
    # without symbolic links (core.symlinks=false, a ZIP download) holds the whole package.
    inside = [REPO / path for path in files if path.startswith("voicegate/")]
    assert [path for path in inside if any(p.is_symlink() for p in (path, *path.parents))] == []
    for part in ("server", "internal", "migrations"):
        assert (REPO / "voicegate" / part / "__init__.py").is_file()
    # The design's top-level names (and ./config.toml, where a checkout's `make serve` finds it) are
    # relative links into the package, for readers: never a second copy that could drift.
    for link, target in LINKS.items():
        assert link in files and (REPO / link).is_symlink(), link
        assert not os.path.isabs(os.readlink(REPO / link)), link
        assert (REPO / link).resolve() == (REPO / target).resolve(), link
    # The migrations live in voicegate/migrations/ and nowhere else: SQL elsewhere would add tables an
    # installed server never creates.
    assert [f for f in files if f.endswith(".sql") and not f.startswith("voicegate/migrations/")] == []
    assert not (REPO / "voicegate" / "internal" / "db" / "migrations").exists()
    assert [f for f in files if f.endswith("PROMPT.md")] == ["voicegate/internal/pipeline/PROMPT.md"]
    assert [f for f in files if f.startswith("voicegate/") and f.endswith("config.toml")] == [
        "voicegate/internal/config/config.toml"]
