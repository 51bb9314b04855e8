"""`voicegate eval PATH...`: scripted callers phone the agent over real SIP and WebRTC and check what it did.

    voicegate eval examples/evals                         # starts its own server (offline defaults)
    voicegate eval my.yaml --config staging.toml          # ... from this config
    voicegate eval evals/ --target sip:agent@10.0.0.5:5060 --target http://10.0.0.5:8080 --api-key KEY
    voicegate eval evals/ --jobs 3 --junit eval.xml --html eval.html

Exit codes: 0 every expectation held (skipped rubrics included, and said so), 1 an expectation failed or a
scenario could not run, 2 a scenario file error (file, line and key named; nothing was run) or bad usage.
The file format, the reports and CI are in docs/evals.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from voicegate.internal.config import Config, load_config
from voicegate.internal.config.loader import CONFIG_PATH_ENV
from voicegate.internal.evals.scenario import Scenario, Speech, load_scenario
from voicegate.internal.evals.voice import CallerVoice
from voicegate.internal.evals.yaml_nodes import ScenarioError
from voicegate.server.cli_common import config_argument
from voicegate.server.cli_logging import configure_tool_logging

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SCENARIO_SUFFIXES = (".yaml", ".yml")


def scenario_files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in SCENARIO_SUFFIXES and p.is_file())
        else:
            found.append(path)
    return found


def load_all(paths: list[Path]) -> tuple[list[Scenario], list[ScenarioError]]:
    scenarios, errors = [], []
    for path in paths:
        try:
            scenarios.append(load_scenario(path))
        except ScenarioError as exc:
            errors.append(exc)
    return scenarios, errors


def split_targets(targets: list[str]) -> tuple[str, str]:
    sip, http = "", ""
    for target in targets:
        if target.lower().startswith(("sip:", "sips:")):
            sip = target
        elif target.lower().startswith(("http://", "https://")):
            http = target.rstrip("/")
        else:
            raise ValueError(f"--target {target!r}: give sip:agent@host:port or http://host:port")
    return sip, http


def run_eval(args: argparse.Namespace, config: Config) -> int:
    files = scenario_files(args.paths)
    if not files:
        print(f"voicegate eval: no scenario files (*.yaml) in {' '.join(args.paths)}", file=sys.stderr)
        return EXIT_USAGE
    scenarios, errors = load_all(files)
    for error in errors:
        print(f"voicegate eval: {error}", file=sys.stderr)
    if errors:
        return EXIT_USAGE
    try:
        sip_uri, http_url = split_targets(args.target)
    except ValueError as exc:
        print(f"voicegate eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs < 1:
        print("voicegate eval: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    # Without a config named on the command line (or in $VOICEGATE_CONFIG) the eval's own server runs the
    # offline defaults, whatever ./config.toml a checkout has lying around.
    explicit = config_argument(args) is not None or bool(os.environ.get(CONFIG_PATH_ENV))
    base = config if explicit else load_config(None)
    configure_tool_logging(base)
    try:
        return asyncio.run(_run(args, base, scenarios, sip_uri, http_url, defaults=not explicit))
    except KeyboardInterrupt:
        print("voicegate eval: interrupted", file=sys.stderr)
        return 130


async def _run(args: argparse.Namespace, config: Config, scenarios: list[Scenario], sip_uri: str, http_url: str,
               *, defaults: bool) -> int:
    from voicegate.internal.evals.console import ConsoleProgress, summary
    from voicegate.internal.evals.hearing import whisper_for_evals
    from voicegate.internal.evals.runner import EvalRunner, Targets
    from voicegate.internal.evals.voice import VoiceError, default_cache_dir
    from voicegate.server.eval_server import EvalServer

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    voice = CallerVoice(args.cache or default_cache_dir())
    try:
        await _render_speech(voice, scenarios, say)
    except VoiceError as exc:
        say(f"voicegate eval: {exc}")
        return EXIT_FAILED
    server: EvalServer | None = None
    api_key = args.api_key if args.api_key is not None else config.server.api_key
    if not (sip_uri or http_url):
        server = EvalServer(config, defaults=defaults, memory=any(s.needs_memory() for s in scenarios))
        memory = "on" if server.config.memory.enabled else "off"
        say(f"starting voicegate for the eval ({'offline defaults' if defaults else 'your config'}, memory {memory}) "
            "...")
        started = time.monotonic()
        try:
            await server.start()
        except RuntimeError as exc:
            say(f"voicegate eval: {exc}")
            server.stop(keep=True)
            return EXIT_FAILED
        say(f"  ready in {time.monotonic() - started:.0f} s: {server.http_url}, {server.sip_uri}")
        sip_uri, http_url, api_key = server.sip_uri, server.http_url, server.config.server.api_key
    say("loading Whisper to hear the agent ...")
    ears = whisper_for_evals(voice.cache_dir.parent / "models")
    judge_model, unavailable = _judge(config)
    try:
        await ears.warm_up()
        runner = EvalRunner(Targets(sip_uri, http_url, api_key, args.sip_from, args.untrusted_from), voice, ears,
                            ConsoleProgress(sys.stdout, sys.stdout.isatty()), judge_model=judge_model,
                            judge_unavailable=unavailable)
        results = await runner.run(scenarios, args.jobs)
    finally:
        await ears.aclose()
        if judge_model is not None:
            await judge_model.aclose()
        if server is not None:
            server.stop(keep=args.keep_server)
            if args.keep_server:
                say(f"the server's directory and log are in {server.work}")
    for line in summary(results):
        print(line)
    _write_reports(args, results, say)
    return EXIT_OK if all(result.ok for result in results) else EXIT_FAILED


async def _render_speech(voice: CallerVoice, scenarios: list[Scenario], say: Any) -> None:
    """Render every caller line before the first call (the first run renders, later runs read the cache)."""
    texts = sorted({part.text for s in scenarios for call in s.calls for turn in call.turns
                    for part in turn.parts if isinstance(part, Speech)})
    missing = voice.missing(texts)
    if missing:
        say(f"rendering {len(missing)} caller line(s) with the Piper voice (once; cached in {voice.cache_dir}) ...")
    await asyncio.to_thread(voice.render, texts, 8000)


def _judge(config: Config) -> tuple[Any, str]:
    """The rubric's judge: the config's language model, when it has one (not the offline agent)."""
    from voicegate.internal.evals.judge import NO_LLM

    if config.effective_llm_provider not in ("openai", "ollama"):
        return None, NO_LLM
    from voicegate.server.providers import build_model

    return build_model(config), ""


def _write_reports(args: argparse.Namespace, results: list[Any], say: Any) -> None:
    from voicegate.internal.evals.html_report import write_html
    from voicegate.internal.evals.junit import write_junit

    if args.junit:
        write_junit(results, args.junit)
        say(f"JUnit XML: {args.junit}")
    if args.html:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        write_html(results, args.html)
        say(f"HTML report: {args.html}")
