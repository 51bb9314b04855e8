"""voicegate as a developer gets it: a checkout is the package, whatever the checkout can hold.

The code lives in real folders of `voicegate/`; the root's internal/, server/, migrations/ and config.toml
are links for readers (docs/packaging.md). So a clone without symbolic links still imports and runs its
tests, the links cannot be imported through, coverage sees the code, and `voicegate --help` stays light.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from voicegate.server.cli import build_parser
from voicegate.server.cli_commands import LazyCommand

RUN_TIMEOUT_S = 300  # a nested pytest or a cold interpreter on two busy cores
# What the argument parser must never pull in: the server, the speech pipeline and its native libraries.
HEAVY = ("voicegate.internal.pipeline", "voicegate.server.gateway", "voicegate.internal.config", "aiortc", "numpy",
         "fastapi", "av", "onnxruntime", "psycopg", "pydantic")
# voicegate, _import_name, server, server.cli, cli_commands, cli_common (+ server.version for --version)
# today: room for a light helper or two, none for a library.
MOST_VOICEGATE_MODULES = 12


def python(*args: str, cwd: Path, pythonpath: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_") and k != "PYTHONPATH"}
    if pythonpath is not None:
        full_env["PYTHONPATH"] = str(pythonpath)
    full_env.update(env or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=full_env,
                          timeout=RUN_TIMEOUT_S)


def imported_modules(importtime: str) -> list[str]:
    """The modules `python -X importtime` reports, in order (the last column of each line)."""
    return [line.rsplit("|", 1)[1].strip() for line in importtime.splitlines()
            if line.startswith("import time:") and not line.rstrip().endswith("| imported package")]


def test_imported_modules_reads_importtimes_report() -> None:
    report = ("import time: self [us] | cumulative | imported package\n"
              "import time:       120 |        120 |   _io\n"
              "import time:      1810 |     246390 | voicegate.server.cli\n")
    assert imported_modules(report) == ["_io", "voicegate.server.cli"]


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_and_version_import_only_the_argument_parser(option: str, tmp_path: Path) -> None:
    done = python("-X", "importtime", "-m", "voicegate", option, cwd=tmp_path, pythonpath=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: voicegate" if option == "--help" else "voicegate ")
    modules = imported_modules(done.stderr)
    assert "voicegate.server.cli" in modules  # the report was read
    assert [name for name in modules if any(name == h or name.startswith(h + ".") for h in HEAVY)] == []
    ours = [name for name in modules if name.split(".")[0] == "voicegate"]
    assert len(ours) <= MOST_VOICEGATE_MODULES, ours


def lazy_handlers(parser: argparse.ArgumentParser) -> Iterator[LazyCommand]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                for key in ("run", "run_unloaded"):
                    handler = command.get_default(key)
                    if isinstance(handler, LazyCommand):
                        yield handler
                yield from lazy_handlers(command)


def test_every_command_named_for_later_import_exists() -> None:
    """A handler is a name until its command runs: a renamed function must fail here, not in a user's shell."""
    handlers = set(lazy_handlers(build_parser()))
    assert {handler.module.rsplit(".", 1)[1] for handler in handlers} == {
        "memory_cli", "rag_cli", "call_cli", "eval_cli", "doctor_cli"}
    for handler in handlers:
        assert callable(getattr(importlib.import_module(handler.module), handler.function, None)), handler


@pytest.mark.parametrize("name", ["internal", "server", "migrations"])
def test_the_root_links_cannot_be_imported_through(name: str) -> None:
    """From the checkout's root (on sys.path as `python -c` puts it), `import internal.sip` would load a
    second copy of the module under another name; it fails at once, naming the import to use."""
    module = {"internal": "internal.sip", "server": "server.cli", "migrations": "migrations"}[name]
    done = python("-c", f"import {module}", cwd=REPO)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and f"'voicegate.{name}'" in last, done.stderr


def test_coverage_of_the_package_measures_its_modules(tmp_path: Path) -> None:
    data = {"COVERAGE_FILE": str(tmp_path / ".coverage")}
    run = python("-m", "coverage", "run", "--source=voicegate", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 f"--basetemp={tmp_path / 'pt'}", "tests/test_config.py", cwd=REPO, env=data)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = python("-m", "coverage", "report", cwd=REPO, env=data)
    assert report.returncode == 0, report.stderr
    measured = set(re.findall(r"^(voicegate/\S+\.py)\s", report.stdout, re.MULTILINE))
    assert {"voicegate/internal/config/loader.py", "voicegate/internal/config/__init__.py",
            "voicegate/server/version.py"} <= measured, report.stdout
    assert len([path for path in measured if path.startswith("voicegate/internal/config/")]) >= 5, report.stdout


@pytest.mark.slow
def test_a_clone_without_symbolic_links_imports_and_runs_the_tests(tmp_path: Path) -> None:
    """`git clone -c core.symlinks=false` (Windows, some CI, a ZIP download alike): the root links arrive as
    small text files, and nothing may need them. Clones the committed HEAD."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-c", "core.symlinks=false", str(REPO), str(clone)], check=True,
                   capture_output=True, timeout=RUN_TIMEOUT_S)
    for link in ("internal", "server", "migrations", "config.toml"):
        assert (clone / link).is_file() and not (clone / link).is_symlink(), link  # a text file: the link's target
    imported = python("-c", "import voicegate.server.gateway as g, voicegate.internal.config as c; "
                      "print(g.__file__); print(c.DEFAULT_CONFIG)", cwd=clone, pythonpath=clone)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == [str(clone / "voicegate" / "server" / "gateway.py"),
                                       str(clone / "voicegate" / "internal" / "config" / "config.toml")]
    tests = python("-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'pt'}",
                   "tests/test_config.py", cwd=clone, pythonpath=clone)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\d+ passed", tests.stdout) and "failed" not in tests.stdout, tests.stdout[-3000:]
