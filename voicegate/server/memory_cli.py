"""`voicegate memory ...`: the operator's tools for caller memory (subject access, deletion, retention).

Every command goes through FrontendMemoryRuntime like the rest of the server. With memory off (and
no markdown files to read) `delete`, `export` and `purge-expired` still act on the data directory's call
recordings, which carry the caller's owner key whether or not memory is on (docs/recording.md). The in-process provider
(`memory.provider = "memory"`) lives inside `voicegate serve`, so there `delete` asks the running server
(DELETE /api/admin/memory/{caller}, with server.api_key) and the other actions refuse rather than read an
empty store of their own. Exit codes: 0 done, 1 failure (unreachable store or server, refused edit),
3 the caller has no memory, 4 cancelled at the prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

from voicegate.internal.config import Config
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.durable import write_atomically
from voicegate.internal.memory.owner import OwnerKeySecretError
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.runtime import FrontendMemoryRuntime, MemoryRuntimeError
from voicegate.internal.memory.subject import (
    RECORDINGS_REMOVED,
    delete_everywhere,
    export_everything,
    is_owner_key,
    resolve_caller,
)
from voicegate.internal.recording.store import RECORDINGS_DIR, RecordingStore
from voicegate.server.cli_logging import configure_tool_logging

EXIT_OK, EXIT_FAILED, EXIT_UNKNOWN_CALLER, EXIT_CANCELLED = 0, 1, 3, 4
IN_SERVER = ('memory.provider = "memory" keeps memory inside the running server, not in a store this command '
             "can open; use the server's HTTP API (GET /api/memory as the caller, "
             "DELETE /api/admin/memory/{caller} with server.api_key), or `voicegate memory delete`, which asks it")


def run_memory(args: argparse.Namespace, config: Config) -> int:
    configure_tool_logging(config)
    try:
        return asyncio.run(_run(args, config))
    except ValueError as exc:
        print(f"voicegate memory: {exc}", file=sys.stderr)
        return 2


async def _run(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.db import Database
    from voicegate.internal.memory.adapters import adapt
    from voicegate.internal.memory.setup import build_provider, build_runtime
    from voicegate.server.gateway import needs_database

    caller = getattr(args, "caller", None)
    identity = resolve_caller(caller, args.kind, config.sip.default_region) if caller else None
    if memory_off(config):
        return await _recordings_only(args, config, identity)
    if config.memory.provider == "memory":
        return await _in_server(args, config, identity)
    # This data directory's call recordings, whether or not recording is on now: old ones are still theirs.
    recordings = RecordingStore(config.data_dir / RECORDINGS_DIR)
    async with AsyncExitStack() as stack:
        database = None
        if needs_database(config) and config.memory.provider == "pgvector":
            database = Database(config.pgvector, config.data_dir)
            try:
                await database.open()
            except Exception as exc:
                print(f"voicegate memory: cannot reach the database: {exc}", file=sys.stderr)
                return EXIT_FAILED
            stack.push_async_callback(database.close)
        try:
            runtime = build_runtime(config, adapt(build_provider(config, database)))
            if identity is not None:  # only a caller's identity needs the secret its key was made with
                await runtime.verify_owner_key()
        except OwnerKeySecretError as exc:
            print(f"voicegate memory: {exc}", file=sys.stderr)
            return EXIT_FAILED
        commands: dict[str, Command] = {
            "show": _show, "export": partial(_export, recordings=recordings),
            "delete": partial(_delete, recordings=recordings), "list": _list,
            "purge-expired": partial(_purge, recordings=recordings, recording_days=config.recording.retention_days),
            "edit": _edit,
        }
        command = commands[args.memory_command]
        try:
            return await command(args, runtime, identity)
        except MemoryRuntimeError as exc:
            print(f"voicegate memory: {exc.message}", file=sys.stderr)
            return EXIT_FAILED


def memory_off(config: Config) -> bool:
    """No memory store to open: memory is off, and its provider keeps nothing this command could read
    without it (the markdown provider's files are read whether or not memory is on now)."""
    return not config.memory.enabled and config.memory.provider != "markdown"


async def _recordings_only(args: argparse.Namespace, config: Config, identity: CallerIdentity | None) -> int:
    """Memory off: delete, export and purge-expired act on this data directory's call recordings, their
    caller's owner key made from the owner-key secret (internal/recording/subject.py)."""
    from voicegate.internal.recording.subject import (
        MEMORY_OFF_NOTE,
        RecordingOwners,
        erase_recordings,
        export_recordings,
        recordings_store,
    )

    command = f"voicegate memory {args.memory_command}"
    store = recordings_store(config.data_dir)
    if args.memory_command == "purge-expired":
        print(f"deleting expired call recordings ({MEMORY_OFF_NOTE}) ...", file=sys.stderr)
        removed = await asyncio.to_thread(store.sweep, config.recording.retention_days)
        print(f"  {RECORDINGS_REMOVED}: {removed} removed")
        print(f"purged {removed} expired record(s)")
        return EXIT_OK
    if args.memory_command not in ("delete", "export"):
        print(f"{command}: memory is off ([memory] enabled = false); there is no memory to "
              f"{args.memory_command}", file=sys.stderr)
        return EXIT_FAILED
    try:
        owner = (_checked_key(args.owner_key) if identity is None
                 else RecordingOwners(config.memory.owner_key_secret, config.data_dir).owner_key(identity))
    except OwnerKeySecretError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    assert owner is not None
    who = _who(args, owner)
    print(f"{command}: {MEMORY_OFF_NOTE}", file=sys.stderr)
    if args.memory_command == "export":
        export = await asyncio.to_thread(export_recordings, store, owner, identity.resource_id if identity else None,
                                         config.recording.retention_days)
        if not export["stored"]:
            print(f"no recordings of {who}", file=sys.stderr)
            return EXIT_UNKNOWN_CALLER
        text = json.dumps(export, indent=2, ensure_ascii=False) + "\n"
        if args.output:
            await asyncio.to_thread(write_atomically, Path(args.output), text)
            print(f"exported {export['counts']['recordings']} recording(s) of {who} to {args.output}",
                  file=sys.stderr)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    if not await _confirmed(args, who):
        return EXIT_CANCELLED
    erased = await erase_recordings(store, owner)
    return _report_erasure(erased.removed, False, who, erased.recordings)


Command = Callable[[argparse.Namespace, FrontendMemoryRuntime, CallerIdentity | None], Awaitable[int]]


def _checked_key(key: str) -> str:
    if not is_owner_key(key):
        raise ValueError("--owner-key is the 64-hex-digit key `voicegate memory list` shows in full with --full")
    return key


def _owner(runtime: FrontendMemoryRuntime, identity: CallerIdentity | None, key: str | None = None) -> str:
    if key:
        return _checked_key(key)
    assert identity is not None
    owner = runtime.owner_key(identity)
    assert owner is not None
    return owner


def _who(args: argparse.Namespace, owner: str) -> str:
    return args.caller if getattr(args, "caller", None) else f"owner {owner[:16]}..."


async def _documents(runtime: FrontendMemoryRuntime, owner: str) -> dict[str, Any]:
    docs = await runtime.latest(owner)
    return {scope: {"content": d.content, "revision": d.revision, "format": d.format, "updated_at": d.updated_at}
            for scope, d in docs.items() if d.revision}


async def _show(args: argparse.Namespace, runtime: FrontendMemoryRuntime, identity: CallerIdentity | None) -> int:
    documents = await _documents(runtime, _owner(runtime, identity))
    if not documents:
        print(f"no memory for {identity.resource_id if identity else ''}", file=sys.stderr)
        return EXIT_UNKNOWN_CALLER
    for scope, doc in documents.items():
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(doc["updated_at"] or 0))
        print(f"== {scope} (revision {doc['revision']}, updated {stamp}) ==")
        print(doc["content"].rstrip() or "(empty)")
    return EXIT_OK


async def _export(args: argparse.Namespace, runtime: FrontendMemoryRuntime, identity: CallerIdentity | None,
                  recordings: RecordingStore | None = None) -> int:
    owner = _owner(runtime, identity, getattr(args, "owner_key", None))
    export = await export_everything(runtime, owner, caller=identity.resource_id if identity else None,
                                     outbox_dir=runtime.outbox_dir, recordings=recordings)
    if not export["stored"]:
        print(f"no memory for {_who(args, owner)}", file=sys.stderr)
        return EXIT_UNKNOWN_CALLER
    text = json.dumps(export, indent=2, ensure_ascii=False) + "\n"
    if args.output:
        # A caller's whole memory: readable by its owner only (0600), and never half written.
        await asyncio.to_thread(write_atomically, Path(args.output), text)
        print(f"exported {sum(export['counts'].values())} record(s) of {_who(args, owner)} to {args.output}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


async def _confirmed(args: argparse.Namespace, who: str) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print("voicegate memory delete: refusing without --yes when not at a terminal", file=sys.stderr)
        return False
    answer = await asyncio.to_thread(input, f"Delete all memory of {who}? This cannot be undone. [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        print("cancelled")
        return False
    return True


def _report_erasure(removed: dict[str, int], announced: bool, who: str, recordings: list[str] | None = None) -> int:
    for place, count in removed.items():
        print(f"  {place}: {count} removed")
        if place == RECORDINGS_REMOVED:
            for name in recordings or []:
                print(f"    {name}")
    total = sum(removed.values())
    if announced:
        print("  running servers on this database were told (their caches and live calls drop it)")
    if total == 0:
        print(f"no memory for {who}", file=sys.stderr)
        return EXIT_UNKNOWN_CALLER
    print(f"deleted {total} record(s) of {who}")
    return EXIT_OK


async def _delete(args: argparse.Namespace, runtime: FrontendMemoryRuntime, identity: CallerIdentity | None,
                  recordings: RecordingStore | None = None) -> int:
    owner = _owner(runtime, identity, getattr(args, "owner_key", None))
    who = _who(args, owner)
    if not await _confirmed(args, who):
        return EXIT_CANCELLED
    print(f"deleting memory of {who} ...", file=sys.stderr)
    erased = await delete_everywhere(runtime, owner, runtime.outbox_dir, recordings=recordings)
    return _report_erasure(erased.removed, erased.announced, who, erased.recordings)


async def _in_server(args: argparse.Namespace, config: Config, identity: CallerIdentity | None) -> int:
    """The in-process provider's memory exists only in the running server: a deletion asks it over HTTP
    (the same erasure, there), and no other action pretends to read a store this process does not have."""
    from voicegate.server.admin_client import AdminClient, AdminRefused
    from voicegate.server.routes_admin import BY_OWNER_KEY

    command = f"voicegate memory {args.memory_command}"
    if args.memory_command != "delete":
        print(f"{command}: {IN_SERVER}", file=sys.stderr)
        return EXIT_FAILED
    try:
        server = AdminClient(config)
    except AdminRefused as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    key = None if identity is not None else _checked_key(args.owner_key)
    who = _who(args, key or "")
    if not await _confirmed(args, who):
        return EXIT_CANCELLED
    print(f"deleting memory of {who} in the server at {server.url} ...", file=sys.stderr)
    try:
        if identity is not None:
            erasure = await server.delete_memory(str(identity.resource_id))
        else:
            erasure = await server.delete_memory(str(key), BY_OWNER_KEY)
    except AdminRefused as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return _report_erasure(erasure.removed, erasure.servers_told, who, erasure.recordings)


async def _list(args: argparse.Namespace, runtime: FrontendMemoryRuntime, identity: CallerIdentity | None) -> int:
    rows = await runtime.owners(args.limit, args.offset)
    if rows is None:
        print("this memory provider cannot list owners", file=sys.stderr)
        return EXIT_FAILED
    print(f"{'owner key':<20} {'docs':>4} {'chars':>6}  {'updated':<16}  {'expires':<16}")
    for row in rows:
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.updated_at))
        expires = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.expires_at))
        key = row.owner_key if args.full else row.owner_key[:16] + "..."
        print(f"{key:<20} {row.documents:>4} {row.chars:>6}  {updated:<16}  {expires:<16}")
    print(f"({len(rows)} shown from {args.offset}; --offset {args.offset + args.limit} for more)"
          if len(rows) == args.limit else f"({len(rows)} shown)")
    return EXIT_OK


async def _purge(args: argparse.Namespace, runtime: FrontendMemoryRuntime, identity: CallerIdentity | None,
                 recordings: RecordingStore | None = None, recording_days: float = 0.0) -> int:
    print("deleting expired memory ...", file=sys.stderr)
    removed = await runtime.purge_expired()
    if recordings is not None and recording_days:  # past recording.retention_days, as the server's sweep
        removed[RECORDINGS_REMOVED] = await asyncio.to_thread(recordings.sweep, recording_days)
    for table, count in removed.items():
        print(f"  {table}: {count} removed")
    print(f"purged {sum(removed.values())} expired record(s)")
    return EXIT_OK


async def _edit(args: argparse.Namespace, runtime: FrontendMemoryRuntime, identity: CallerIdentity | None) -> int:
    owner = _owner(runtime, identity)
    if args.append is not None:
        outcome = await runtime.edit(owner, args.document, "append", content=args.append,
                                     expected_revision=args.expected_revision, context=ChangeContext("cli"))
    else:
        outcome = await runtime.edit(owner, args.document, "replace", old_text=args.replace, new_text=args.new_text,
                                     expected_revision=args.expected_revision, context=ChangeContext("cli"))
    document = outcome.documents[args.document]
    print(f"{'changed' if outcome.changed else 'unchanged'}: {args.document} is at revision {document.revision}")
    return EXIT_OK
