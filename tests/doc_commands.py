"""The shell blocks of README.md and docs/quickstart.md, and how tests/test_readme_commands.py runs each.

Every ```sh, ```bash and ```console block is found here. A block runs as written unless the lists below
say otherwise, each entry with its reason; an entry that matches no block is itself an error, so the
lists cannot outlive the text they describe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

DOCUMENTS = ("README.md", "docs/quickstart.md")
_FENCE = re.compile(r"^```(sh|bash|console)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Block:
    document: str
    line: int  # of the opening fence, 1-based
    text: str  # the commands, as a shell reads them (a console block's "$ " lines only)

    @property
    def first_command(self) -> str:
        """The block's first command without its trailing comment (so a reworded comment keeps the entry)."""
        return self.text.strip().splitlines()[0].split(" #", 1)[0].strip()

    def describe(self) -> str:
        return f"{self.document}:{self.line}:\n{self.text}"


def blocks_in(repo: Path) -> list[Block]:
    found = []
    for document in DOCUMENTS:
        source = (repo / document).read_text()
        for match in _FENCE.finditer(source):
            language, body = match.group(1), match.group(2)
            if language == "console":  # "$ command" lines; the rest is what the command printed
                body = "".join(line[2:] + "\n" for line in body.splitlines() if line.startswith("$ "))
            line = source.count("\n", 0, match.start()) + 1
            found.append(Block(document, line, body))
    return found


class How(Enum):
    RUN = "run"  # run to completion, exit status 0
    SERVE = "serve"  # a server: start it, wait until its page answers, run the WHILE_SERVING blocks, stop it
    WHILE_SERVING = "while serving"  # talks to the server the document's SERVE block started
    SKIP = "skip"


# Blocks that cannot run in a test, by (document, first command), with the reason.
SKIPPED: dict[tuple[str, str], str] = {
    ("docs/quickstart.md", "git clone <repository URL> voicegate && cd voicegate"):
        "needs the network and the reader's clone URL; the test already runs in a fresh copy of the tree",
    ("README.md", "make serve"):
        "this block also holds `make test`, the whole suite (about 20 minutes), which must not run inside itself; "
        "its `make serve` is the same command docs/quickstart.md's `make serve` block runs, started and stopped",
    ("README.md", "pipx install ."):
        "pipx is not on the test machine, and installing `.` here would be a second minute-long install: "
        "tests/package/test_installed.py runs this sequence against the wheel of this tree, in a fresh venv "
        "outside it, from an empty directory (config init, doctor and its fix, serve, a SIP call, memory)",
}
# Never run by the test, whatever the lists say: the suite would start itself again.
RECURSIVE = ("make test", "make soak", "pytest")

# Servers: started in the background, used, then stopped with Ctrl-C (SIGINT to the process group).
# `make serve CONFIG=my.toml` is expected to work: the Makefile passes `serve --config`, which the CLI
# accepts before or after the command (server/cli.py).
SERVERS = ("make serve", ".venv/bin/voicegate config init my.toml")
# Blocks that talk to the server (curl, a SIP call): they run while the first server of their document runs.
WHILE_SERVING = ("curl -s localhost:8080/health", "sipp -sn uac")

# The documents use the defaults (HTTP 8080, SIP 5060). Other helpers and CI run servers on this machine
# at the same time, so the test serves on free ports (VOICEGATE_SERVER__PORT, VOICEGATE_SIP__BIND) and
# these are the only changes it makes to a block's text.
DOC_HTTP_PORT = "8080"
DOC_SIP_PORT = "5060"


def how(block: Block) -> How:
    first = block.first_command
    if (block.document, first) in SKIPPED:
        return How.SKIP
    if any(command in block.text for command in RECURSIVE):
        raise ValueError(f"runs the test suite; list it in SKIPPED with the reason: {block.describe()}")
    if first.startswith(WHILE_SERVING):
        return How.WHILE_SERVING
    if first.startswith(SERVERS):
        return How.SERVE
    return How.RUN


def with_ports(text: str, http_port: int, sip_port: int) -> str:
    text = re.sub(rf"\blocalhost:{DOC_HTTP_PORT}\b", f"localhost:{http_port}", text)
    return re.sub(rf"\b127\.0\.0\.1:{DOC_SIP_PORT}\b", f"127.0.0.1:{sip_port}", text)
