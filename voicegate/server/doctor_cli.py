"""`voicegate doctor [--json]`: the checks of server/doctor.py, printed as they run.

The command loads the config itself, so that a config that does not load is one of its answers
rather than the end of the run. Exit code: 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from voicegate.server.doctor import Check, exit_code, format_check, report_json, run_checks, summary_line
from voicegate.server.doctor_mcp import check_mcp
from voicegate.server.doctor_probes import check_database, check_devices, check_models, check_ports
from voicegate.server.doctor_realtime import check_realtime

PROBES = (check_ports, check_models, check_devices, check_database, check_mcp, check_realtime)


def run_loaded(args: argparse.Namespace, config: Any) -> int:
    """`doctor` run by a dispatcher that loaded the config first: the checks load it again themselves."""
    return run_doctor(args, getattr(args, "config_path", None))


def run_doctor(args: argparse.Namespace, path: Path | None) -> int:
    checks: list[Check] = []
    for check in run_checks(path, PROBES):
        checks.append(check)
        if not args.json:
            print(format_check(check), flush=True)
    if args.json:
        print(report_json(checks))
    else:
        print(summary_line(checks))
    return exit_code(checks)

