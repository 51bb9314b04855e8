"""`voicegate config init [PATH]`: the commented defaults, written where a deployment starts its config."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.test_docs import key_paths
from voicegate.internal.config import DEFAULT_CONFIG, Config, load_config
from voicegate.server.version import package_version


def test_init_writes_the_commented_defaults_to_config_toml_here(tmp_path: Path) -> None:
    done = run_cli("config", "init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "config.toml").read_text()
    header, _, body = written.partition("\n\n")
    assert f"voicegate config init` (voicegate {package_version()})" in header
    assert body == DEFAULT_CONFIG.read_text()  # every key, its default, its one-line meaning
    assert load_config(tmp_path / "config.toml").model_dump() == load_config(None).model_dump()
    assert all(f"\n{path.rsplit('.', 1)[-1]} = " in written for path in key_paths(Config))
    assert "`voicegate config check`" in done.stdout  # ./config.toml is read without --config
    checked = run_cli("config", "check", cwd=tmp_path)
    assert checked.returncode == 0 and "(from config.toml)" in checked.stdout, checked.stderr


def test_init_never_overwrites_a_config_unless_forced(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text("[memory]\nenabled = true\n")
    refused = run_cli("config", "init", str(mine), cwd=tmp_path)
    assert refused.returncode == 1 and "exists" in refused.stderr and "--force" in refused.stderr
    assert mine.read_text() == "[memory]\nenabled = true\n"
    forced = run_cli("config", "init", str(mine), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert f"voicegate --config {mine} config check" in forced.stdout
    assert load_config(mine).memory.enabled is False


def test_init_works_while_the_current_config_is_broken_and_makes_missing_directories(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[memory]\nmax_chars = -5\n")  # what init is for: starting over
    done = run_cli("config", "init", "deploy/voicegate.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert load_config(tmp_path / "deploy" / "voicegate.toml").memory.max_chars == 2000
    assert [p.name for p in (tmp_path / "deploy").iterdir()] == ["voicegate.toml"]  # no partial file left


def test_init_into_a_directory_says_to_name_a_file(tmp_path: Path) -> None:
    done = run_cli("config", "init", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and "is a directory" in done.stderr, done.stderr


def test_init_dash_prints_the_file_and_writes_nothing(tmp_path: Path) -> None:
    done = run_cli("config", "init", "-", cwd=tmp_path)  # how a container hands its defaults out
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(DEFAULT_CONFIG.read_text()) and done.stdout.startswith("# Written by")
    assert list(tmp_path.iterdir()) == []


def test_init_never_replaces_the_packaged_defaults_a_checkout_links_to(tmp_path: Path) -> None:
    link = tmp_path / "config.toml"
    link.symlink_to(str(DEFAULT_CONFIG))  # what ./config.toml is in a checkout
    done = run_cli("config", "init", "--force", cwd=tmp_path)
    assert done.returncode == 1 and "voicegate's own default config" in done.stderr, done.stderr
    assert link.is_symlink() and "Written by" not in DEFAULT_CONFIG.read_text()
