"""Regenerate the key tables in docs/configuration.md from the commented config.toml.

    .venv/bin/python scripts/config_reference.py          # rewrite the tables in place
    .venv/bin/python scripts/config_reference.py --check  # exit 1 if the docs are out of date

config.toml is the one place a key's default and one-line meaning are written; the docs table is
derived from it, and tests/test_docs.py fails when they drift apart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN = "<!-- BEGIN GENERATED KEY TABLES (scripts/config_reference.py) -->"
END = "<!-- END GENERATED KEY TABLES -->"
_KEY = re.compile(r"^([a-z_]+)\s*=\s*(.*?)\s*(?:#\s*(.*))?$")


def tables(config_text: str) -> str:
    out: list[str] = []
    section = ""
    for raw in config_text.splitlines():
        line = raw.strip()
        header = re.match(r"^\[([a-z_.]+)\]", line)
        if header:
            section = header.group(1)
            out += ["", f"### [{section}]", "", "| key | default | environment | meaning |", "|---|---|---|---|"]
            continue
        if not section or not line or line.startswith("#"):
            continue
        match = _KEY.match(line)
        if not match:
            continue
        key, default, comment = match.group(1), match.group(2), match.group(3) or ""
        env = "VOICEGATE_" + "__".join(part.upper() for part in [*section.split("."), key])
        default = default.replace("|", "\\|")
        out.append(f"| `{key}` | `{default}` | `{env}` | {comment.replace('|', '/')} |")
    return "\n".join(out).strip() + "\n"


def render(doc: str, config_text: str) -> str:
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{tables(config_text)}\n{END}{tail}"


def main() -> int:
    doc_path = REPO / "docs" / "configuration.md"
    doc = doc_path.read_text()
    new = render(doc, (REPO / "config.toml").read_text())
    if "--check" in sys.argv:
        if new != doc:
            print("docs/configuration.md is out of date: run scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    doc_path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
