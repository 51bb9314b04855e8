"""JUnit XML for CI: a test suite per scenario run, a test case per turn and per call (the rubric its
own case, so that "skipped: no LLM configured" shows as skipped, never as passed)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from voicegate.internal.evals.checks import Check
from voicegate.internal.evals.console import check_line
from voicegate.internal.evals.results import ScenarioResult


def _case(suite: ET.Element, classname: str, name: str, checks: list[Check], seconds: float = 0.0) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    failed = [check for check in checks if check.failed]
    skipped = [check for check in checks if check.status == "skipped"]
    if failed:
        failure = ET.SubElement(case, "failure", type="expectation", message="; ".join(
            f"{check.name}: {check.detail}" for check in failed)[:1000])
        failure.text = "\n".join(check_line(check) for check in failed)
    elif skipped and len(skipped) == len(checks):
        ET.SubElement(case, "skipped", message="; ".join(check.detail for check in skipped))
    ET.SubElement(case, "system-out").text = "\n".join(check_line(check) for check in checks) or "(no checks)"


def junit_xml(results: list[ScenarioResult]) -> bytes:
    root = ET.Element("testsuites", name="voicegate eval")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for result in results:
        suite = ET.SubElement(root, "testsuite", name=result.title, file=str(result.scenario.file),
                              time=f"{result.seconds:.3f}")
        if result.error:
            case = ET.SubElement(suite, "testcase", classname=result.title, name="run", time="0")
            ET.SubElement(case, "error", type="setup", message=result.error[:1000]).text = result.error
        for call in result.calls:
            _case(suite, result.title, call.title, [c for c in call.checks if c.name != "rubric"], call.seconds)
            rubric = [c for c in call.checks if c.name == "rubric"]
            if rubric:
                _case(suite, result.title, f"{call.title}: rubric", rubric)
            for turn in call.turns:
                _case(suite, result.title, f"{call.title} turn {turn.index + 1}: {turn.label}", turn.checks)
        counts = {"tests": len(suite.findall("testcase")),
                  "failures": len(suite.findall("testcase/failure")),
                  "errors": len(suite.findall("testcase/error")),
                  "skipped": len(suite.findall("testcase/skipped"))}
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")


def write_junit(results: list[ScenarioResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(junit_xml(results))
