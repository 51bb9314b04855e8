"""The pieces of `voicegate eval` around the calls: the server it starts, the judge it picks, what it
prints on a terminal and in a log."""

from __future__ import annotations

import io
from pathlib import Path

from voicegate.internal.config import load_config
from voicegate.internal.evals.checks import CallFacts, Check
from voicegate.internal.evals.console import ConsoleProgress, summary
from voicegate.internal.evals.judge import NO_LLM
from voicegate.internal.evals.replies import GREETING, AgentLine, TurnView
from voicegate.internal.evals.results import CallResult, ScenarioResult, TurnResult
from voicegate.internal.evals.scenario import load_scenario
from voicegate.server.eval_cli import _judge, scenario_files, split_targets
from voicegate.server.eval_server import EVAL_TRANSFER_TARGETS, TRUSTED_EVAL_PEER, eval_server_config


def test_the_started_server_gets_what_the_eval_needs_and_keeps_a_config_files_choices(tmp_path: Path) -> None:
    base = load_config(None)
    base.sip.trusted_peers = ["203.0.113.0/24"]
    defaults = eval_server_config(base, tmp_path / "a", defaults=True, memory=True)
    assert defaults.server.call_events and len(defaults.server.api_key) >= 16 and len(defaults.server.jwt_secret) >= 16
    assert defaults.server.host == "127.0.0.1" and defaults.sip.bind.startswith("127.0.0.1:")
    assert defaults.sip.trusted_peers == ["203.0.113.0/24", TRUSTED_EVAL_PEER]
    assert defaults.webrtc.ice_hosts == ["127.0.0.1"] and defaults.server.whip_rate_per_min == 0
    assert defaults.memory.enabled and defaults.sip.transfer_targets == EVAL_TRANSFER_TARGETS
    assert defaults.server.shed_wait_ms == defaults.server.shed_loop_lag_ms == 0 and defaults.sip.registrations == []
    assert not defaults.admission.enabled  # the eval's own calls are never refused as overload
    assert not eval_server_config(base, tmp_path / "b", defaults=True, memory=False).memory.enabled
    # A config file's own choices stand: memory off stays off, however much a scenario wants it.
    chosen = eval_server_config(base, tmp_path / "c", defaults=False, memory=True)
    assert not chosen.memory.enabled and chosen.sip.transfer_targets == {} and chosen.server.shed_wait_ms == 3000
    assert chosen.admission.enabled
    assert base.server.api_key == "" and not base.server.call_events  # the caller's config is left alone


def test_the_judge_is_the_configured_language_model_and_never_the_offline_agent() -> None:
    config = load_config(None)
    model, why = _judge(config)
    assert model is None and why == NO_LLM
    config.openai.api_key = "sk-test-0123456789"
    model, why = _judge(config)
    assert model is not None and model.name == "openai" and why == ""


def test_paths_and_targets(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("calls: []")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text("calls: []")
    (tmp_path / "notes.txt").write_text("")
    assert scenario_files([str(tmp_path)]) == [tmp_path / "a.yaml", tmp_path / "sub" / "b.yml"]
    assert split_targets(["sip:agent@10.0.0.5:5060", "http://10.0.0.5:8080/"]) == (
        "sip:agent@10.0.0.5:5060", "http://10.0.0.5:8080")


def result(tmp_path: Path) -> ScenarioResult:
    path = tmp_path / "s.yaml"
    path.write_text("name: demo\ncalls:\n  - turns: [{say: hi}]\n")
    view = TurnView(0, agent=[AgentLine("Hello!")], voice_to_voice_ms=1234.0)
    turn = TurnResult(0, "“hi”", [Check("said /hello/", "passed"), Check("said /bye/", "failed", "heard “Hello!”")],
                      view)
    call = CallResult(0, "", [Check("rubric", "skipped", f"skipped: {NO_LLM}")], [turn], TurnView(GREETING), None,
                      [], CallFacts(), 2.0)
    return ScenarioResult(load_scenario(path), "sip", [call], seconds=2.0)


def test_a_terminal_gets_bars_then_a_line_per_turn_and_a_log_gets_lines(tmp_path: Path) -> None:
    done = result(tmp_path)
    tty = io.StringIO()
    progress = ConsoleProgress(tty, tty=True)
    progress.started("demo [sip]", 2)
    progress.turn_played("demo [sip]")
    assert "[############............] 1/2 turns  demo [sip]" in tty.getvalue()
    progress.played("demo [sip]")
    progress.call_done("demo [sip]", done.calls[0])
    progress.finished(done)
    shown = tty.getvalue()
    assert "  ✗ call 1 turn 1: “hi” → “Hello!”  1234 ms" in shown
    assert "      ✗ said /bye/: heard “Hello!”" in shown and "- rubric: skipped: no LLM configured" in shown
    assert "\x1b[" in shown  # the bars are redrawn in place
    log = io.StringIO()
    plain = ConsoleProgress(log, tty=False)
    plain.started("demo [sip]", 2)
    plain.call_done("demo [sip]", done.calls[0])
    plain.finished(done)
    assert "\x1b[" not in log.getvalue()
    assert log.getvalue().splitlines() == [
        "demo [sip]: started (2 turns)", "demo [sip]: call 1: 1/3 checks passed",
        f"  - rubric: skipped: {NO_LLM}", "  ✗ said /bye/: heard “Hello!”",
        "✗ demo [sip]: 1/3 checks passed, 1 skipped (2 s)"]
    lines = summary([done])
    assert "1 scenario runs, 1 calls, 3 checks: 1 passed, 1 failed, 1 skipped" in lines
    assert f"SKIPPED demo [sip] call 1: rubric: skipped: {NO_LLM}" in lines
    assert "FAILED demo [sip] call 1 turn 1 (“hi”): said /bye/: heard “Hello!”" in lines
