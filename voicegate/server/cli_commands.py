"""The arguments of the `voicegate` sub-commands that live in modules of their own (memory, rag, call, eval,
doctor), and the handlers they run, named rather than imported.

`voicegate --help` and `voicegate --version` build the whole parser, so whatever the parser's module
imports, every command pays for before it does anything: the memory runtime, the evals' caller voice and
the doctor's MCP client cost about 1 s of imports. Here the set-up imports only argparse; each handler is
a `LazyCommand`, the module and function to run, imported when that command runs
(tests/package/test_checkout.py holds `--help` and `--version` to a short list of modules).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LazyCommand:
    """`module.function(args, config_or_path)`, imported on the first call."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace, config: Any) -> int:
        handler = getattr(importlib.import_module(self.module), self.function)
        return int(handler(args, config))


def add_command_modules(commands: Any) -> None:
    """Every sub-command defined outside server/cli.py, in the order `voicegate --help` lists them."""
    add_memory_commands(commands)
    add_rag_commands(commands)
    add_call_command(commands)
    add_eval_command(commands)
    add_doctor_command(commands)


def add_memory_commands(commands: Any) -> None:
    memory = commands.add_parser("memory", help="show, export, edit and delete caller memory")
    actions = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)

    def caller_args(parser: argparse.ArgumentParser, by_key: bool = False) -> None:
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--caller",
                         help="sip:+15551234567, jwt:alice, trusted_header:VALUE, or a raw value with --kind")
        if by_key:
            who.add_argument("--owner-key", metavar="KEY",
                             help="the stored owner key (from `memory list`); needs no owner-key secret")
        parser.add_argument("--kind", choices=["sip", "jwt", "trusted_header"],
                            help="the kind of a raw --caller value (a phone number is normalised to E.164)")

    show = actions.add_parser("show", help="print a caller's memory documents")
    caller_args(show)
    export = actions.add_parser("export", help="everything stored of a caller, as JSON (subject-access requests)")
    caller_args(export, by_key=True)
    export.add_argument("--output", "-o", metavar="FILE", help="write the JSON here (default: standard output)")
    delete = actions.add_parser(
        "delete", help="delete every trace of a caller's memory, on every node",
        description="Delete every trace of a caller's memory, on every node. With memory.provider = \"memory\" "
                    "the memory lives inside `voicegate serve`: this asks the running server (DELETE "
                    "/api/admin/memory/{caller} at server.host:server.port, with server.api_key).")
    caller_args(delete, by_key=True)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    listing = actions.add_parser("list", help="callers with memory: keys, sizes, ages")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--full", action="store_true", help="print whole owner keys (for --owner-key)")
    actions.add_parser("purge-expired", help="delete expired memory now (the sweeper does it periodically)")
    edit = actions.add_parser("edit", help="append to or replace text in a caller's document")
    caller_args(edit)
    edit.add_argument("--document", choices=["user", "memory"], required=True)
    group = edit.add_mutually_exclusive_group(required=True)
    group.add_argument("--append", metavar="TEXT")
    group.add_argument("--replace", metavar="OLD_TEXT")
    edit.add_argument("--with", dest="new_text", default="", metavar="NEW_TEXT", help="replacement (empty deletes)")
    edit.add_argument("--expected-revision", type=int)
    memory.set_defaults(run=LazyCommand("voicegate.server.memory_cli", "run_memory"))


def add_rag_commands(commands: Any) -> None:
    about = "manage the documents that knowledge retrieval (RAG) searches: ingest, list, delete"
    rag = commands.add_parser("rag", help=about, description=about[0].upper() + about[1:] + ".")
    actions = rag.add_subparsers(dest="rag_command", metavar="ACTION", required=True)
    ingest = actions.add_parser("ingest", help="chunk, embed and store files (.txt, .md, .csv; .pdf with pypdf)")
    ingest.add_argument("files", nargs="+", metavar="FILE")
    ingest.add_argument("--chunk-size", type=int, metavar="N", help="words per chunk (default: [rag] chunk_size)")
    ingest.add_argument("--chunk-overlap", type=int, metavar="N",
                        help="words a chunk shares with the one before (default: [rag] chunk_overlap)")
    actions.add_parser("list", help="the stored sources: chunk counts and when they were ingested")
    delete = actions.add_parser("delete", help="remove every chunk of one source")
    delete.add_argument("source", metavar="SOURCE", help="a source as `rag list` shows it, or the file's path")
    rag.set_defaults(run=LazyCommand("voicegate.server.rag_cli", "run_rag"))


def add_call_command(commands: Any) -> None:
    call = commands.add_parser("call", help="place an outbound SIP call and let the agent talk")
    call.add_argument("target", metavar="sip:user@host[:port]", help="whom to call (;transport=tcp for TCP)")
    call.add_argument("--greeting", help="what to say when answered (default: pipeline.greeting_outgoing)")
    call.add_argument("--timeout", type=float, metavar="S",
                      help="give up (CANCEL) when not answered within S seconds (default: sip.outbound.timeout_s)")
    call.add_argument("--amd", action=argparse.BooleanOptionalAction, default=None,
                      help="answering-machine detection before speaking (default: amd.enabled)")
    call.add_argument("--voicemail-message", metavar="TEXT",
                      help="what to leave on an answering machine (default: amd.voicemail_message)")
    call.add_argument("--goal", metavar="TEXT",
                      help="walk the callee's phone menu toward this first, e.g. \"reach billing\" (docs/sip.md)")
    call.set_defaults(run=LazyCommand("voicegate.server.call_cli", "run_call"))


def add_eval_command(commands: Any) -> None:
    evals = commands.add_parser(
        "eval", help="phone the agent with scripted callers (YAML scenarios) and check it",
        description="Phone the agent with scripted callers over real SIP and WebRTC calls and check what it did "
        "(docs/evals.md). Without --target it starts a server of its own: from --config or $VOICEGATE_CONFIG "
        "when given, else the offline defaults (a ./config.toml is not read). Exit 0: every expectation held; "
        "1: one failed; 2: a scenario file error.")
    evals.add_argument("paths", nargs="+", metavar="PATH", help="scenario files, or directories of *.yaml files")
    evals.add_argument("--target", action="append", default=[], metavar="URI",
                       help="a running server: sip:agent@host:port for SIP scenarios, http://host:port for WebRTC "
                       "and the API (repeatable; default: start one from --config)")
    evals.add_argument("--api-key", default=None, help="the server's API key (default: server.api_key)")
    evals.add_argument("--jobs", type=int, default=2, metavar="N", help="scenarios run at once (default 2)")
    evals.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML here")
    evals.add_argument("--html", type=Path, metavar="FILE", help="write the HTML report here (recordings beside it)")
    evals.add_argument("--sip-from", default="127.0.0.1", metavar="HOST",
                       help="the address trusted callers phone from: one in the server's sip.trusted_peers")
    evals.add_argument("--untrusted-from", default="127.0.0.2", metavar="HOST",
                       help="the address untrusted callers phone from: one the server does not trust")
    evals.add_argument("--cache", type=Path, metavar="DIR", help="where rendered caller speech is kept "
                       "(default: ~/.cache/voicegate/caller-speech)")
    evals.add_argument("--keep-server", action="store_true", help="keep the started server's directory and log")
    evals.set_defaults(run=LazyCommand("voicegate.server.eval_cli", "run_eval"))


def add_doctor_command(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="check this machine for the config: tools, models, ports, database, MCP servers, "
                       "the Realtime model, secrets")
    doctor.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")
    # The dispatcher calls `run_unloaded` with the config's path before loading it, because a broken
    # config is one of the doctor's answers; `run` serves a dispatcher that loads first.
    doctor.set_defaults(run=LazyCommand("voicegate.server.doctor_cli", "run_loaded"),
                        run_unloaded=LazyCommand("voicegate.server.doctor_cli", "run_doctor"))
