"""Regenerate the key tables in docs/configuration.md from the commented config.toml (the package's
internal/config/config.toml, which ./config.toml links to).

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
_ARRAY_HEADER = re.compile(r"^#\s*\[\[([a-z_.]+)\]\]")
# The value may hold "#" inside a string ("#" as a keypad key): strings are matched whole before the comment.
_KEY = re.compile(r'^([a-z_]+)\s*=\s*((?:"(?:[^"\\]|\\.)*"|[^#"])*?)\s*(?:#\s*(.*))?$')


def tables(config_text: str) -> str:
    out: list[str] = []
    section = ""
    in_array = False  # inside a commented `# [[a.b]]` example: its keys are documented, not defaults
    for raw in config_text.splitlines():
        line = raw.strip()
        header = re.match(r"^\[([a-z_.]+)\]", line)
        array = _ARRAY_HEADER.match(line)
        if header or array:
            section = (header or array).group(1)  # type: ignore[union-attr]
            in_array = array is not None
            title = f"[[{section}]]" if in_array else f"[{section}]"
            out += ["", f"### {title}", "", "| key | default | environment | meaning |", "|---|---|---|---|"]
            continue
        if in_array:
            if not line.startswith("#"):
                in_array, section = False, ""
                continue
            line = line.lstrip("#").strip()
        elif not section or not line or line.startswith("#"):
            continue
        match = _KEY.match(line)
        if not match:
            continue
        key, default, comment = match.group(1), match.group(2), match.group(3) or ""
        # An element of an array of tables has no VOICEGATE_ variable of its own (pydantic-settings
        # cannot address one); the whole array can still be set as JSON.
        env = "(none)" if in_array else "VOICEGATE_" + "__".join(part.upper() for part in [*section.split("."), key])
        default = default.replace("|", "\\|")
        env_cell = env if in_array else f"`{env}`"
        out.append(f"| `{key}` | `{default}` | {env_cell} | {comment.replace('|', '/')} |")
    return "\n".join(out).strip() + "\n"


def render(doc: str, config_text: str) -> str:
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{tables(config_text)}\n{END}{tail}"


def main() -> int:
    doc_path = REPO / "docs" / "configuration.md"
    doc = doc_path.read_text()
    new = render(doc, (REPO / "voicegate" / "internal" / "config" / "config.toml").read_text())
    if "--check" in sys.argv:
        if new != doc:
            print("docs/configuration.md is out of date: run scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    doc_path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
