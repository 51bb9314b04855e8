"""The commands docs/scaling.md gives for Kamailio and HAProxy are valid as written: each is run with the
program's own configuration check (`-c`) added, since its addresses (10.0.0.x) are the reader's, not
this machine's. The topology they configure is what the other tests in this directory run."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO

SCALING = REPO / "docs" / "scaling.md"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def block_starting(program: str) -> str:
    (block,) = [b for b in SH_BLOCK.findall(SCALING.read_text()) if re.search(rf"\b{program} -", b)]
    return block


@pytest.mark.parametrize("program", ["kamailio", "haproxy"])
def test_the_documented_command_is_a_valid_configuration(program: str) -> None:
    command = re.sub(rf"\b{program} ", f"{program} -c ", block_starting(program), count=1)
    done = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
