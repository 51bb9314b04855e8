"""What `voicegate eval` prints while it runs and when it is done.

On a terminal: a progress bar per running scenario at the bottom (turns played of its turns) while the
calls run, then a line per turn as each call is judged (once every call is over, so that hearing and
judging take no CPU from a live call). Elsewhere (CI logs): a line when a scenario starts and when its
calls are done, a line per judged call with every failure and its reason, and the summary at the end.
"""

from __future__ import annotations

from typing import TextIO

from voicegate.internal.evals.checks import Check
from voicegate.internal.evals.results import CallResult, ScenarioResult

BAR_WIDTH = 24
MARKS = {"passed": "✓", "failed": "✗", "skipped": "-"}


def check_line(check: Check) -> str:
    return f"{MARKS[check.status]} {check.name}" + (f": {check.detail}" if check.status != "passed" else "")


def turn_lines(call: CallResult) -> list[str]:
    lines = []
    for turn in call.turns:
        bad = [check for check in turn.checks if check.status != "passed"]
        mark = "✗" if any(check.failed for check in bad) else "✓"
        said = turn.view.said or turn.view.heard
        wait = f"  {turn.view.voice_to_voice_ms:.0f} ms" if turn.view.voice_to_voice_ms is not None else ""
        lines.append(f"  {mark} {call.title} turn {turn.index + 1}: {turn.label[:60]}"
                     + (f" → “{said[:70]}”" if said else " → (no reply)") + wait)
        lines += [f"      {check_line(check)}" for check in bad]
    lines += [f"  {check_line(check)} ({call.title})" for check in call.checks if check.status != "passed"]
    return lines


class ConsoleProgress:
    def __init__(self, out: TextIO, tty: bool) -> None:
        self.out = out
        self.tty = tty
        self._bars: dict[str, list[int]] = {}
        self._drawn = 0

    def _print(self, lines: list[str]) -> None:
        if self.tty and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0
        for line in lines:
            self.out.write(line + "\n")
        if self.tty:
            for unit, (done, total) in self._bars.items():
                filled = BAR_WIDTH * done // max(total, 1)
                self.out.write(f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} turns  {unit}\n")
            self._drawn = len(self._bars)
        self.out.flush()

    def started(self, unit: str, turns: int) -> None:
        self._bars[unit] = [0, turns]
        self._print([] if self.tty else [f"{unit}: started ({turns} turns)"])

    def turn_played(self, unit: str) -> None:
        self._bars[unit][0] += 1
        self._print([])

    def played(self, unit: str) -> None:
        """Its calls are over; the verdict comes once every scenario has played (Whisper waits for that)."""
        self._bars.pop(unit, None)
        self._print([f"{unit}: calls done"])

    def call_done(self, unit: str, call: CallResult) -> None:
        if self.tty:
            self._print([f"{unit}, {call.title}:", *turn_lines(call)])
            return
        checks = call.all_checks()
        bad = [check for check in checks if check.status != "passed"]
        self._print([f"{unit}: {call.title}: {len(checks) - len(bad)}/{len(checks)} checks passed",
                     *[f"  {check_line(check)}" for check in bad]])

    def finished(self, result: ScenarioResult) -> None:
        self._print([verdict_line(result)])


def verdict_line(result: ScenarioResult) -> str:
    checks = result.checks()
    if result.error:
        return f"✗ {result.title}: could not run: {result.error}"
    mark = "✓" if result.ok else "✗"
    skipped = f", {result.skipped} skipped" if result.skipped else ""
    return (f"{mark} {result.title}: {len(checks) - result.failures - result.skipped}/{len(checks)} checks "
            f"passed{skipped} ({result.seconds:.0f} s)")


def summary(results: list[ScenarioResult]) -> list[str]:
    checks = [check for result in results for check in result.checks()]
    failed = sum(result.failures for result in results)
    skipped = sum(result.skipped for result in results)
    calls = sum(len(result.calls) for result in results)
    lines = ["", f"{len(results)} scenario runs, {calls} calls, {len(checks)} checks: "
             f"{len(checks) - sum(c.failed for c in checks) - skipped} passed, {failed} failed, {skipped} skipped"]
    for result in results:
        if result.error:
            lines.append(f"FAILED {result.title}: could not run: {result.error}")
        for call in result.calls:
            for check in call.checks:
                if check.status != "passed":
                    lines.append(f"{check.status.upper()} {result.title} {call.title}: {check.name}: {check.detail}")
            for turn in call.turns:
                for check in turn.checks:
                    if check.failed:
                        lines.append(f"FAILED {result.title} {call.title} turn {turn.index + 1} ({turn.label[:50]}): "
                                     f"{check.name}: {check.detail}")
    return lines
