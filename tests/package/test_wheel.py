"""The wheel carries everything the server reads at run time, and the repository keeps one copy of each."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.package.wheel import BuiltWheel, committable_files, project_version

pytestmark = pytest.mark.xdist_group("wheel")  # one worker builds the wheel its tests share

PACKAGES = ("server/", "internal/")


def test_the_wheel_holds_every_file_of_the_packages_and_nothing_of_the_checkout(built_wheel: BuiltWheel) -> None:
    assert built_wheel.path.name == f"voicegate-{project_version()}-py3-none-any.whl"
    names = built_wheel.names()
    wanted = {path for path in committable_files() if path.startswith(PACKAGES)}
    assert sorted(wanted - names) == []  # SQL, the default config, PROMPT.md, the page, the turn weights, code
    data = {name for name in names if not name.endswith(".py") and ".dist-info/" not in name}
    assert {"internal/config/config.toml", "internal/pipeline/PROMPT.md", "internal/web/static/index.html",
            "internal/db/migrations/0001_init.sql"} <= data
    # Beside the packages' files only what the build adds: its metadata and the revision stamp.
    extra = {name for name in names - wanted if ".dist-info/" not in name}
    assert extra == {"server/REVISION"}
    assert built_wheel.read("server/REVISION").strip() == built_wheel.revision


def test_the_packaged_default_config_is_the_checkouts_config_toml(built_wheel: BuiltWheel) -> None:
    assert built_wheel.read("internal/config/config.toml") == (REPO / "config.toml").read_text()


def test_the_repository_keeps_one_copy_of_each_runtime_file() -> None:
    files = committable_files()
    # The migrations live beside their runner and nowhere else: a branch still adding SQL to the old
    # top-level migrations/ would add tables an installed server never creates.
    assert [f for f in files if f.endswith(".sql") and not f.startswith("internal/db/migrations/")] == []
    assert not (REPO / "migrations").exists()
    # ./config.toml (where a checkout's `make serve` finds it, and what the docs call config.toml) is a
    # link to the package's file, not a second text that could drift from it.
    assert (REPO / "config.toml").is_symlink()
    assert (REPO / "config.toml").resolve() == REPO / "internal" / "config" / "config.toml"
    assert [f for f in files if f.endswith("PROMPT.md")] == ["internal/pipeline/PROMPT.md"]
