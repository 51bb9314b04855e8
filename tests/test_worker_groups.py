"""`make test` runs on two workers (`-n 2 --dist loadgroup`): the tests that share an expensive fixture must
land on one of them, or both build it (tests/worker_groups.py). Checked on a small suite run the
way `make test` runs the real one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SUITE = {
    "conftest.py": "import pytest\nfrom tests.worker_groups import keep_groups_together\n"
                   "@pytest.hookimpl(trylast=True)\n"
                   "def pytest_collection_modifyitems(config, items):\n    keep_groups_together(config, items)\n",
    "test_marked_a.py": "import pytest\npytestmark = pytest.mark.xdist_group('shared')\n"
                        "def test_a1(): pass\ndef test_a2(): pass\n",
    "test_marked_b.py": "import pytest\npytestmark = pytest.mark.xdist_group('shared')\n"
                        "def test_b1(): pass\ndef test_b2(): pass\n",
    "test_module_fixture.py": "import pytest\n@pytest.fixture(scope='module')\ndef server(): return 1\n"
                              + "".join(f"def test_m{n}(server): pass\n" for n in range(6)),
    "test_free.py": "".join(f"def test_f{n}(): pass\n" for n in range(8)),
}


def test_a_group_and_a_module_fixtures_tests_each_run_on_one_worker(tmp_path: Path) -> None:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-v", "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    ran = re.findall(r"\[(gw\d)\] .*?PASSED (test_\w+)\.py::(test_\w+)", done.stdout)
    assert len(ran) == 18, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for worker, module, _test in ran:
        group = "shared" if module.startswith("test_marked") else module
        workers.setdefault(group, set()).add(worker)
    assert len(workers["shared"]) == 1, ran
    assert len(workers["test_module_fixture"]) == 1, ran
