"""A config that breaks what the scenarios check turns them red, saying which expectation failed and what
the agent said instead: here, memory switched off under the memory examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.speech import NEURAL_CACHE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("evals"), pytest.mark.timeout(900)]

MEMORY_EXAMPLES = ["memory_across_calls.yaml", "forgetting.yaml", "untrusted_caller.yaml"]


def test_memory_off_turns_the_memory_scenarios_red_and_says_what_was_heard(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[memory]\nenabled = false\n")
    examples = [str(REPO / "examples" / "evals" / name) for name in MEMORY_EXAMPLES]
    done = run_cli("eval", *examples, "--config", str(broken), "--jobs", "3", "--cache", str(NEURAL_CACHE),
                   timeout=800)
    assert done.returncode == 1, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert "memory off" in done.stderr  # the server it started says so
    failures = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    for title in ("remembers a caller across calls [sip]", "forgets what the caller takes back [webrtc]",
                  "an untrusted caller claiming a remembered number hears nothing of it [sip]"):
        assert any(line.startswith(f"FAILED {title}") for line in failures), (title, failures)
    # Which expectation failed, and why: the memory the eval could not read ...
    assert any("call 1 (tells): memory contains /name is Sam/: cannot read the caller's memory" in line
               and "memory_disabled" in line for line in failures), failures
    # ... and, for the second call, what the agent said instead, in its transcript and on the wire.
    asked = [line for line in failures if "call 2 (asks) turn 1" in line and "said /your name is sam/" in line]
    assert asked, failures
    assert "said (its transcript): “I don't know your name yet.”" in asked[0]
    assert "heard on the wire: “" in asked[0]
