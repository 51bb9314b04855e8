"""The wheel carries everything the server reads at run time, and the repository keeps one copy of each."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.package.wheel import BuiltWheel, committable_files, project_version

pytestmark = pytest.mark.xdist_group("wheel")  # one worker builds the wheel its tests share

# The folders the design puts at the top level, and the one import package that holds them in the wheel
# (voicegate/server, voicegate/internal, voicegate/migrations are links to them in a checkout).
FOLDERS = ("server/", "internal/", "migrations/")


def in_wheel(path: str) -> str:
    return f"voicegate/{path}" if path.startswith(FOLDERS) else path


def test_the_wheel_holds_every_file_of_the_packages_and_nothing_of_the_checkout(built_wheel: BuiltWheel) -> None:
    assert built_wheel.path.name == f"voicegate-{project_version()}-py3-none-any.whl"
    names = built_wheel.names()
    files = committable_files()
    wanted = {in_wheel(path) for path in files if path.startswith(FOLDERS)}
    wanted |= {path for path in files if path.startswith("voicegate/") and not (REPO / path).is_symlink()}
    assert sorted(wanted - names) == []  # SQL, the default config, PROMPT.md, the page, the turn weights, code
    data = {name for name in names if not name.endswith(".py") and ".dist-info/" not in name}
    assert {"voicegate/internal/config/config.toml", "voicegate/internal/pipeline/PROMPT.md",
            "voicegate/internal/web/static/index.html", "voicegate/migrations/0001_init.sql"} <= data
    # Beside the packages' files only what the build adds: its metadata and the revision stamp.
    extra = {name for name in names - wanted if ".dist-info/" not in name}
    assert extra == {"voicegate/server/REVISION"}
    assert built_wheel.read("voicegate/server/REVISION").strip() == built_wheel.revision


def test_the_wheels_only_top_level_import_package_is_voicegate(built_wheel: BuiltWheel) -> None:
    """Two distributions that ship the same top-level name overwrite each other silently: ours is one name."""
    names = built_wheel.names()
    (top_level,) = [name for name in names if name.endswith(".dist-info/top_level.txt")]
    assert built_wheel.read(top_level).split() == ["voicegate"]
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"voicegate"}
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    assert "voicegate = voicegate.server.cli:main" in built_wheel.read(entry_points)


def test_the_packaged_default_config_is_the_checkouts_config_toml(built_wheel: BuiltWheel) -> None:
    assert built_wheel.read("voicegate/internal/config/config.toml") == (REPO / "config.toml").read_text()


def test_the_repository_keeps_one_copy_of_each_runtime_file() -> None:
    files = committable_files()
    # The migrations live in the top-level migrations/ (the design's place, packaged as
    # voicegate.migrations) and nowhere else: SQL elsewhere would add tables an installed server never creates.
    assert [f for f in files if f.endswith(".sql") and not f.startswith("migrations/")] == []
    assert not (REPO / "internal" / "db" / "migrations").exists()
    # The import package's parts are links to the design's folders, never copies that could drift.
    for part in ("server", "internal", "migrations"):
        assert (REPO / "voicegate" / part).is_symlink() and (REPO / "voicegate" / part).resolve() == REPO / part
    # ./config.toml (where a checkout's `make serve` finds it, and what the docs call config.toml) is a
    # link to the package's file, not a second text that could drift from it.
    assert (REPO / "config.toml").is_symlink()
    assert (REPO / "config.toml").resolve() == REPO / "internal" / "config" / "config.toml"
    assert [f for f in files if f.endswith("PROMPT.md")] == ["internal/pipeline/PROMPT.md"]
