"""Knowledge in Supabase, over its PostgREST API: no database connection, only HTTPS and a key.

Retrieval calls a database function by RPC, `POST {url}/rest/v1/rpc/{function}` with
`{"query_embedding": [...], "match_count": k}`, the shape StreamCore sends; the function returns rows
with `content` and `similarity` (docs/agent-runtime.md has its SQL). Ingestion writes rows to
`{url}/rest/v1/{table}`. Every request carries the key twice, as `apikey` (Supabase's gateway) and as
a bearer token (PostgREST's role).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np

from voicegate.internal.config.providers import SupabaseConfig
from voicegate.internal.rag.chunking import Chunk
from voicegate.internal.rag.embedding import EMBEDDING_DIMS, Embedder, Vector
from voicegate.internal.rag.ingest import (
    EmbedFn,
    KnowledgeStoreError,
    SourceSummary,
    StoredChunk,
    SyncResult,
    chunk_key,
    embed_missing,
    plan_sync,
)
from voicegate.internal.rag.retriever import RagConfigError

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 10.0
# PostgREST caps a response (Supabase: 1000 rows by default); reads page below that.
PAGE_ROWS = 500
# Rows per insert request: well under Supabase's request-size limit with 256-dimension vectors.
INSERT_BATCH = 200
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class PostgrestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class PostgrestClient:
    """The few PostgREST calls retrieval and ingestion make, with the Supabase headers."""

    def __init__(self, url: str, api_key: str, *, timeout_s: float = HTTP_TIMEOUT_S,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = url.rstrip("/") + "/rest/v1"
        self._http = httpx.AsyncClient(
            timeout=timeout_s, transport=transport,
            headers={"apikey": api_key, "Authorization": f"Bearer {api_key}", "Accept": "application/json"},
        )

    @classmethod
    def from_config(cls, config: SupabaseConfig) -> PostgrestClient:
        problems = []
        if not config.url:
            problems.append("set [supabase] url (https://<project>.supabase.co)")
        elif not config.url.startswith(("https://", "http://")):
            problems.append(f"[supabase] url must start with https:// (got {config.url!r})")
        if not config.api_key:
            problems.append("set [supabase] api_key (the service-role key to ingest, the anon key is enough to search)")
        if problems:
            raise RagConfigError('[rag] provider = "supabase": ' + "; ".join(problems))
        return cls(config.url, config.api_key)

    async def rpc(self, function: str, arguments: dict[str, Any]) -> Any:
        return await self._request("POST", f"/rpc/{function}", json=arguments)

    async def select(self, table: str, params: dict[str, str]) -> list[dict[str, Any]]:
        """Every row the filter matches, read a page at a time."""
        rows: list[dict[str, Any]] = []
        while True:
            page = await self._request("GET", f"/{table}",
                                       params={**params, "limit": str(PAGE_ROWS), "offset": str(len(rows))})
            rows += page
            if len(page) < PAGE_ROWS:
                return rows

    async def upsert(self, table: str, rows: list[dict[str, Any]], on_conflict: str) -> None:
        for start in range(0, len(rows), INSERT_BATCH):
            await self._request("POST", f"/{table}", params={"on_conflict": on_conflict},
                                json=rows[start : start + INSERT_BATCH],
                                prefer="resolution=merge-duplicates,return=minimal")

    async def delete(self, table: str, params: dict[str, str]) -> int:
        deleted = await self._request("DELETE", f"/{table}", params={**params, "select": "chunk_index"},
                                      prefer="return=representation")
        return len(deleted) if isinstance(deleted, list) else 0

    async def _request(self, method: str, path: str, *, params: dict[str, str] | None = None, json: Any = None,
                       prefer: str | None = None) -> Any:
        headers = {"Prefer": prefer} if prefer else {}
        try:
            response = await self._http.request(method, self.base_url + path, params=params, json=json,
                                                headers=headers)
        except httpx.HTTPError as exc:
            raise PostgrestError(0, f"cannot reach {self.base_url} ({type(exc).__name__})") from None
        if response.status_code >= 400:
            raise PostgrestError(response.status_code, _error_message(response))
        if response.status_code == 204 or not response.content:
            return []
        try:
            return response.json()
        except ValueError:
            raise PostgrestError(response.status_code, "the response is not JSON") from None

    async def aclose(self) -> None:
        await self._http.aclose()


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict):
        parts = [str(body[key]) for key in ("message", "hint") if body.get(key)]
        return "; ".join(parts) or json.dumps(body)[:200]
    return str(body)[:200]


def _identifier(value: str, key: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise RagConfigError(f"[supabase] {key} must be a plain SQL identifier (got {value!r})")
    return value


class SupabaseRetriever:
    def __init__(self, client: PostgrestClient, embedder: Embedder, function: str = "match_documents",
                 min_score: float = 0.0) -> None:
        self._client = client
        self._embedder = embedder
        self._function = _identifier(function, "function")
        self._min_score = min_score

    async def retrieve(self, text: str, top_k: int) -> list[str]:
        query = text.strip()
        if not query or top_k < 1:
            return []
        try:
            (vector,) = await self._embedder.embed([query])
            rows = await self._client.rpc(self._function,
                                          {"query_embedding": [float(x) for x in vector], "match_count": top_k})
        except Exception as exc:  # logged, never raised: a retrieval failure must not fail a turn
            log.warning("knowledge retrieval from Supabase failed: %s", exc if isinstance(exc, PostgrestError)
                        else type(exc).__name__)
            return []
        if not isinstance(rows, list):
            log.warning("knowledge retrieval from Supabase: %s did not return a list of rows", self._function)
            return []
        chunks = []
        for row in rows[:top_k]:
            if not isinstance(row, dict) or not isinstance(row.get("content"), str):
                continue
            similarity = row.get("similarity")
            if self._min_score and isinstance(similarity, int | float) and similarity < self._min_score:
                continue
            chunks.append(row["content"])
        return chunks

    async def aclose(self) -> None:
        await self._client.aclose()


class SupabaseStore:
    """Ingestion over PostgREST. There is no transaction across HTTP requests, so a changed source is
    replaced by upserting every chunk by (source, chunk_index) and then deleting the indexes past its
    end: a search in between sees old and new chunks side by side, never a source with none."""

    def __init__(self, client: PostgrestClient, table: str = "documents") -> None:
        self._client = client
        self._table = _identifier(table, "table")

    async def sync(self, source: str, chunks: Sequence[Chunk], embed: EmbedFn) -> SyncResult:
        try:
            rows = await self._client.select(self._table, {"select": "chunk_index,content_hash,metadata,embedding",
                                                            "source": f"eq.{source}", "order": "chunk_index"})
            stored = [StoredChunk(int(r["chunk_index"]), str(r["content_hash"]),
                                  str((r.get("metadata") or {}).get("embedder", ""))) for r in rows]
            plan = plan_sync(stored, chunks)
            if plan.identical:
                return SyncResult(source, 0, len(chunks), 0)
            known = {item.key: parse_vector(r["embedding"]) for item, r in zip(stored, rows, strict=True)}
            vectors = await embed_missing(plan, known, embed)
            # created_at is sent because an upsert only updates the columns it is given.
            now = datetime.now(UTC).isoformat()
            await self._client.upsert(self._table, [
                {"source": source, "chunk_index": c.index, "content": c.content, "content_hash": c.content_hash,
                 "embedding": [float(x) for x in vectors[chunk_key(c)]], "metadata": c.metadata,
                 "created_at": now}
                for c in chunks
            ], on_conflict="source,chunk_index")
            await self._client.delete(self._table, {"source": f"eq.{source}", "chunk_index": f"gte.{len(chunks)}"})
        except (PostgrestError, KeyError, TypeError, ValueError) as exc:
            raise KnowledgeStoreError(self._describe(exc)) from None
        return SyncResult(source, plan.added, plan.unchanged, plan.removed)

    async def sources(self) -> list[SourceSummary]:
        try:
            rows = await self._client.select(self._table, {"select": "source,created_at,metadata", "order": "source"})
        except PostgrestError as exc:
            raise KnowledgeStoreError(self._describe(exc)) from None
        counts: dict[str, int] = {}
        latest: dict[str, datetime] = {}
        embedders: dict[str, set[str]] = {}
        for row in rows:
            source = str(row["source"])
            counts[source] = counts.get(source, 0) + 1
            if row.get("created_at"):
                at = datetime.fromisoformat(row["created_at"])
                latest[source] = max(at, latest.get(source, at))
            embedder = (row.get("metadata") or {}).get("embedder")
            embedders.setdefault(source, set()).update([embedder] if embedder else [])
        return [SourceSummary(source, count, latest.get(source), ", ".join(sorted(embedders[source])))
                for source, count in counts.items()]

    async def delete(self, source: str) -> int:
        try:
            return await self._client.delete(self._table, {"source": f"eq.{source}"})
        except PostgrestError as exc:
            raise KnowledgeStoreError(self._describe(exc)) from None

    async def aclose(self) -> None:
        await self._client.aclose()

    def _describe(self, exc: Exception) -> str:
        if isinstance(exc, PostgrestError) and exc.status == 404:
            return (f"Supabase has no table {self._table!r} ({exc}); create it with the SQL in "
                    "docs/agent-runtime.md, or set [supabase] table")
        if isinstance(exc, PostgrestError):
            return f"Supabase refused: {exc}"
        return f"Supabase returned rows of an unexpected shape ({type(exc).__name__}: {exc})"


def parse_vector(value: Any) -> Vector:
    """A vector column as PostgREST returns it: pgvector's text form "[0.1,0.2,...]" (or a JSON list)."""
    items = json.loads(value) if isinstance(value, str) else value
    vector = np.asarray(items, dtype=np.float32)
    if vector.shape != (EMBEDDING_DIMS,):
        raise ValueError(f"a stored embedding has shape {vector.shape}, expected ({EMBEDDING_DIMS},)")
    return vector
