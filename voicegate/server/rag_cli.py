"""`voicegate rag ...`: fill, inspect and prune the knowledge that retrieval searches.

`ingest` cuts files into chunks, embeds them and syncs each file into the configured store (pgvector
table or Supabase); re-running it on unchanged files changes nothing. `list` shows what is stored and
`delete` removes one source. Exit codes: 0 done, 1 failure (store unreachable, retrieval not
configured, nothing to delete), 2 bad arguments or a file that could not be read (the others are
still ingested).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

from voicegate.internal.config import Config
from voicegate.server.cli_logging import configure_tool_logging

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class ProgressBar:
    """A bar redrawn in place on a terminal; a line per tenth when stderr is a file or a pipe."""

    WIDTH = 30

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self._tty = self.stream.isatty()
        self._last_tenth = -1

    def __call__(self, done: int, total: int) -> None:
        if self._tty:
            filled = self.WIDTH * done // max(total, 1)
            self.stream.write(f"\r{self.label}: [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} chunks")
            if done >= total:
                self.stream.write("\n")
        else:
            tenth = 10 * done // max(total, 1)
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.stream.write(f"{self.label}: {done}/{total} chunks\n")
        self.stream.flush()


def run_rag(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.rag.chunking import ChunkingError, check_settings
    configure_tool_logging(config)
    if args.rag_command == "ingest":
        args.chunk_size = config.rag.chunk_size if args.chunk_size is None else args.chunk_size
        args.chunk_overlap = config.rag.chunk_overlap if args.chunk_overlap is None else args.chunk_overlap
        try:
            check_settings(args.chunk_size, args.chunk_overlap)
        except ChunkingError as exc:
            print(f"voicegate rag ingest: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return asyncio.run(_run(args, config))


async def _run(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.db import Database
    from voicegate.internal.rag import KnowledgeStoreError, RagConfigError, build_store

    name = f"voicegate rag {args.rag_command}"
    if not config.rag.provider:
        print(f'{name}: knowledge retrieval is off; set [rag] provider = "pgvector" or "supabase" '
              "(or VOICEGATE_RAG__PROVIDER)", file=sys.stderr)
        return EXIT_FAILED
    async with AsyncExitStack() as stack:
        database = None
        if config.rag.provider == "pgvector":
            database = Database(config.pgvector, config.data_dir)
            try:
                await database.open()
            except Exception as exc:
                print(f"{name}: cannot reach the database: {exc}", file=sys.stderr)
                await database.close()
                return EXIT_FAILED
            stack.push_async_callback(database.close)
        try:
            store = build_store(config, database)
        except RagConfigError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        stack.push_async_callback(store.aclose)
        try:
            if args.rag_command == "ingest":
                return await _ingest(args, config, store)
            if args.rag_command == "list":
                return await _list(store)
            return await _delete(args, store)
        except KnowledgeStoreError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return EXIT_FAILED


async def _ingest(args: argparse.Namespace, config: Config, store: Any) -> int:
    from voicegate.internal.rag import ingest_files
    from voicegate.internal.rag.embedding import build_embedder

    embedder = build_embedder(config.rag.embedding, config.openai)
    assert embedder is not None  # [rag] embedding has no "none"
    paths = [Path(file) for file in args.files]
    report = await ingest_files(store, embedder, paths, args.chunk_size, args.chunk_overlap,
                                progress=ProgressBar("ingest"))
    for message in report.skipped:
        print(f"voicegate rag ingest: {message}", file=sys.stderr)
    for result in report.results:
        state = "changed" if result.changed else "unchanged"
        print(f"{state:<9} +{result.added} ={result.unchanged} -{result.removed}  {result.source}")
    print(report.summary())
    return EXIT_USAGE if report.skipped else EXIT_OK


async def _list(store: Any) -> int:
    sources = await store.sources()
    if not sources:
        print("no documents ingested")
        return EXIT_OK
    width = max(len("embedder"), *(len(s.embedders) for s in sources))
    print(f"{'chunks':>6}  {'ingested at':<19}  {'embedder':<{width}}  source")
    for summary in sources:
        at = summary.ingested_at.astimezone().strftime("%Y-%m-%d %H:%M:%S") if summary.ingested_at else "-"
        print(f"{summary.chunks:>6}  {at:<19}  {summary.embedders or '-':<{width}}  {summary.source}")
    print(f"({len(sources)} source(s), {sum(s.chunks for s in sources)} chunk(s))")
    return EXIT_OK


async def _delete(args: argparse.Namespace, store: Any) -> int:
    from voicegate.internal.rag import source_name

    source = args.source
    removed = await store.delete(source)
    if removed == 0 and source_name(Path(source)) != source:
        source = source_name(Path(source))
        removed = await store.delete(source)
    if removed == 0:
        print(f"voicegate rag delete: nothing stored for {args.source} (see `voicegate rag list`)", file=sys.stderr)
        return EXIT_FAILED
    print(f"deleted {removed} chunk(s) of {source}")
    return EXIT_OK
