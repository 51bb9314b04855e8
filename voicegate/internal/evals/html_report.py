"""The report a person opens: every call's transcript both ways, a player for each turn's recording (the
caller on the left channel, the agent on the right), a bar for each turn's voice-to-voice wait, and
every expectation with what was found instead when it failed.

One HTML file with its style inline; the recordings are WAV files in a folder beside it
(`report.html` -> `report_audio/`), so the page stays light however long the calls were.
"""

from __future__ import annotations

import re
import time
import wave
from html import escape
from pathlib import Path
from urllib.parse import quote

from voicegate.internal.evals.checks import Check
from voicegate.internal.evals.console import MARKS
from voicegate.internal.evals.replies import TurnView
from voicegate.internal.evals.results import CallResult, Clip, ScenarioResult, TurnResult

BAR_SCALE_MS = 5000.0  # a bar this long fills the track

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #1d2430; }
h1 { margin-bottom: .2rem } .meta { color: #5b6575 }
section.scenario { border: 1px solid #d5dae1; border-radius: 8px; padding: 0 1.2rem 1rem; margin: 1.4rem 0; }
section.fail { border-left: 6px solid #c62828 } section.pass { border-left: 6px solid #2e7d32 }
.mark.passed { color: #2e7d32 } .mark.failed { color: #c62828 } .mark.skipped { color: #8a6d00 }
ul.checks { list-style: none; padding-left: .2rem; margin: .3rem 0 } ul.checks li { margin: .15rem 0 }
li.failed .detail { color: #8e1b1b } .detail { color: #5b6575 }
table.transcript { border-collapse: collapse; margin: .5rem 0 1rem } table.transcript td { padding: .15rem .6rem;
  vertical-align: top } td.role { color: #5b6575; white-space: nowrap }
.turn { border-top: 1px solid #eceff3; padding: .6rem 0 } .turn h4 { margin: 0 0 .3rem }
.lines div { margin: .1rem 0 } .label { color: #5b6575; display: inline-block; min-width: 12rem }
.latency { display: flex; align-items: center; gap: .6rem; margin: .3rem 0 }
.track { position: relative; width: 22rem; height: .8rem; background: #eceff3; border-radius: 4px }
.bar { height: 100%; background: #4f7cc4; border-radius: 4px } .bar.slow { background: #c62828 }
.bound { position: absolute; top: -3px; width: 2px; height: 1.1rem; background: #1d2430 }
audio { width: 22rem; height: 2rem }
"""


def write_html(results: list[ScenarioResult], path: Path, title: str = "voicegate eval") -> None:
    """The report at `path`, its recordings in `<stem>_audio/` beside it."""
    audio_dir = path.with_name(path.stem + "_audio")
    audio_dir.mkdir(parents=True, exist_ok=True)
    body = [f"<h1>{escape(title)}</h1>", f"<p class='meta'>{escape(_totals(results))} · "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}</p>"]
    for number, result in enumerate(results):
        body.append(_scenario(result, audio_dir, f"s{number + 1}"))
    path.write_text("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
                    f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
                    + "\n".join(body) + "\n</body></html>\n", encoding="utf-8")


def _totals(results: list[ScenarioResult]) -> str:
    checks = [check for result in results for check in result.checks()]
    failed = sum(result.failures for result in results)
    skipped = sum(check.status == "skipped" for check in checks)
    return (f"{len(results)} scenario runs, {sum(r.ok for r in results)} passed; {len(checks)} checks, "
            f"{failed} failed, {skipped} skipped")


def _checks(checks: list[Check]) -> str:
    items = "".join(f"<li class='{check.status}'><span class='mark {check.status}'>{MARKS[check.status]}</span> "
                    f"{escape(check.name)}" + (f" <span class='detail'>— {escape(check.detail)}</span>"
                                               if check.detail else "") + "</li>" for check in checks)
    return f"<ul class='checks'>{items}</ul>" if items else ""


def _scenario(result: ScenarioResult, audio_dir: Path, key: str) -> str:
    state = "pass" if result.ok else "fail"
    parts = [f"<section class='scenario {state}'><h2><span class='mark {'passed' if result.ok else 'failed'}'>"
             f"{'✓' if result.ok else '✗'}</span> {escape(result.title)}</h2>",
             f"<p class='meta'>{escape(str(result.scenario.file))} · {result.seconds:.0f} s</p>"]
    if result.scenario.description:
        parts.append(f"<p>{escape(result.scenario.description)}</p>")
    if result.error:
        parts.append(_checks([Check("could not run", "failed", result.error)]))
    for call in result.calls:
        parts.append(_call(call, audio_dir, f"{key}-{_slug(result.transport)}-c{call.index + 1}"))
    return "\n".join(parts) + "</section>"


def _call(call: CallResult, audio_dir: Path, key: str) -> str:
    parts = [f"<h3>{escape(call.title)}</h3>", _checks(call.checks)]
    if call.transcript:
        rows = "".join(f"<tr><td class='role'>{'caller (as the server heard)' if role == 'user' else 'agent'}</td>"
                       f"<td>{escape(text)}</td></tr>" for role, text in call.transcript)
        parts.append(f"<table class='transcript'>{rows}</table>")
    if call.greeting.runs or call.greeting.agent:
        parts.append(_turn_block("Greeting", call.greeting, [], call.greeting_clip, audio_dir, f"{key}-greeting"))
    for turn in call.turns:
        parts.append(_turn(turn, audio_dir, f"{key}-t{turn.index + 1}"))
    return "\n".join(parts)


def _turn(turn: TurnResult, audio_dir: Path, key: str) -> str:
    bound = turn_bound(turn)
    return _turn_block(f"Turn {turn.index + 1}: {turn.label}", turn.view, turn.checks, turn.clip, audio_dir, key,
                       bound, show_latency=True)


def turn_bound(turn: TurnResult) -> float | None:
    for check in turn.checks:
        found = re.match(r"voice to voice <= (\d+) ms", check.name)
        if found:
            return float(found.group(1))
    return None


def _turn_block(heading: str, view: TurnView, checks: list[Check], clip: Clip | None, audio_dir: Path, key: str,
                bound: float | None = None, show_latency: bool = False) -> str:
    lines = []
    if view.understood:
        lines.append(("the server heard the caller", " / ".join(view.understood)))
    lines.append(("the agent said (its transcript)", view.said or "—"))
    lines.append(("the caller heard (Whisper)", view.heard or "—"))
    if view.tools:
        lines.append(("tools", "; ".join(f"{t.get('name')}({t.get('arguments')})" for t in view.tools)))
    html = [f"<div class='turn'><h4>{escape(heading)}</h4><div class='lines'>"]
    html += [f"<div><span class='label'>{escape(label)}</span> {escape(text)}</div>" for label, text in lines]
    html.append("</div>")
    if show_latency:
        html.append(_latency(view, bound))
    if clip is not None:
        name = f"{key}.wav"
        _write_wav(audio_dir / name, clip)
        html.append(f"<audio controls preload='metadata' src='{escape(quote(audio_dir.name))}/{escape(name)}'></audio>")
    html.append(_checks(checks) + "</div>")
    return "".join(html)


def _latency(view: TurnView, bound: float | None) -> str:
    if view.voice_to_voice_ms is None:
        why = "talked over: no clean wait" if view.talked_over else "no reply heard"
        return f"<div class='latency'><span class='label'>voice to voice</span> {why}</div>"
    ms = view.voice_to_voice_ms
    width = min(100.0, 100 * ms / BAR_SCALE_MS)
    slow = " slow" if bound is not None and ms > bound else ""
    marker = (f"<div class='bound' style='left:{min(100.0, 100 * bound / BAR_SCALE_MS):.1f}%'></div>"
              if bound is not None else "")
    return (f"<div class='latency'><span class='label'>voice to voice</span><div class='track'>"
            f"<div class='bar{slow}' style='width:{width:.1f}%'></div>{marker}</div> {ms:.0f} ms</div>")


def _write_wav(path: Path, clip: Clip) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(clip.rate)
        out.writeframes(clip.pcm)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
