"""A local stand-in for Supabase's PostgREST API over one table and its `match_documents` function.

Served under /rest/v1: POST /rpc/{function} (cosine similarity over the stored rows, like the SQL
function docs/agent-runtime.md gives deployers), and GET / POST / DELETE on the table with the bits of
PostgREST's query language ingestion uses: `column=op.value` filters (eq, neq, gt, gte, lt, lte),
`select`, `order`, `limit`, `offset`, `on_conflict` with `Prefer: resolution=merge-duplicates`, and
`Prefer: return=representation|minimal`. Like Supabase, every request needs the key both as `apikey`
and as `Authorization: Bearer ...`, and vector columns come back in pgvector's text form "[...]".

    async with FakePostgrest(api_key="k") as fake:
        client = PostgrestClient(fake.url, "k")
        ...
        assert fake.rows[0]["source"] == "faq.md"
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tests.fakes.background import BackgroundAsgiServer

CONTROL_PARAMS = {"select", "order", "limit", "offset", "on_conflict"}
VECTOR_COLUMNS = {"embedding"}


@dataclass
class RecordedRequest:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any


def _error(status: int, message: str, code: str = "") -> JSONResponse:
    return JSONResponse({"code": code, "message": message, "details": None, "hint": None}, status_code=status)


def _matches(row: dict[str, Any], filters: dict[str, str]) -> bool:
    for column, expression in filters.items():
        op, _, raw = expression.partition(".")
        value = row.get(column)
        target: Any = int(raw) if isinstance(value, int) and raw.lstrip("-").isdigit() else raw
        ok = {"eq": value == target, "neq": value != target}.get(op)
        if ok is None:
            if value is None:
                return False
            ok = {"gt": value > target, "gte": value >= target, "lt": value < target, "lte": value <= target}[op]
        if not ok:
            return False
    return True


def _render(row: dict[str, Any], select: str | None) -> dict[str, Any]:
    columns = [c.strip() for c in select.split(",")] if select and select != "*" else list(row)
    out = {}
    for column in columns:
        value = row.get(column)
        out[column] = "[" + ",".join(f"{x:g}" for x in value) + "]" if column in VECTOR_COLUMNS and value else value
    return out


class FakePostgrest(BackgroundAsgiServer):
    def __init__(self, *, api_key: str = "test-service-key", function: str = "match_documents",
                 table: str = "documents", dims: int = 256) -> None:
        super().__init__()
        self.api_key = api_key
        self.function = function
        self.table = table
        self.dims = dims
        self.rows: list[dict[str, Any]] = []
        self.requests: list[RecordedRequest] = []
        self.error_status: int | None = None  # every request fails with this status while set
        self._next_id = 1

    def rpc_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/rest/v1/rpc/")]

    def add_row(self, source: str, chunk_index: int, content: str, embedding: list[float]) -> None:
        self._insert({"source": source, "chunk_index": chunk_index, "content": content, "content_hash": "",
                      "embedding": embedding, "metadata": {}})

    def _insert(self, row: dict[str, Any]) -> None:
        stored = {"id": self._next_id, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), **row}
        self._next_id += 1
        self.rows.append(stored)

    def _check(self, request: Request, body: Any) -> JSONResponse | None:
        params = dict(request.query_params)
        self.requests.append(RecordedRequest(request.method, request.url.path, params, dict(request.headers), body))
        if self.error_status is not None:
            return _error(self.error_status, "the fake was told to fail")
        if request.headers.get("apikey") != self.api_key:
            return _error(401, "Invalid API key")
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "JWT invalid or missing", "PGRST301")
        return None

    def app(self) -> FastAPI:
        app = FastAPI()

        async def body_of(request: Request) -> Any:
            raw = await request.body()
            return json.loads(raw) if raw else None

        @app.post("/rest/v1/rpc/{function}")
        async def rpc(function: str, request: Request) -> Response:
            body = await body_of(request)
            if refusal := self._check(request, body):
                return refusal
            if function != self.function:
                return _error(404, f"Could not find the function public.{function} in the schema cache", "PGRST202")
            if not isinstance(body, dict) or "query_embedding" not in body:
                return _error(400, "query_embedding is required")
            query = np.asarray(body["query_embedding"], dtype=np.float64)
            if query.shape != (self.dims,):
                return _error(400, f"different vector dimensions {self.dims} and {query.shape[0]}", "22000")
            count = int(body.get("match_count", 3))
            scored = []
            for row in self.rows:
                vector = np.asarray(row["embedding"], dtype=np.float64)
                similarity = float(vector @ query / (np.linalg.norm(vector) * np.linalg.norm(query)))
                scored.append({"id": row["id"], "content": row["content"], "metadata": row.get("metadata"),
                               "similarity": similarity})
            scored.sort(key=lambda r: r["similarity"], reverse=True)
            return JSONResponse(scored[:count])

        @app.get("/rest/v1/{table}")
        async def select(table: str, request: Request) -> Response:
            if refusal := self._check(request, None):
                return refusal
            if table != self.table:
                return _error(404, f'relation "public.{table}" does not exist', "42P01")
            params = dict(request.query_params)
            rows = [r for r in self.rows if _matches(r, {k: v for k, v in params.items() if k not in CONTROL_PARAMS})]
            if order := params.get("order"):
                column = order.split(".")[0]
                rows.sort(key=lambda r: (r.get(column) is None, r.get(column)))
            offset = int(params.get("offset", 0))
            limit = int(params["limit"]) if "limit" in params else None
            rows = rows[offset : offset + limit if limit is not None else None]
            return JSONResponse([_render(r, params.get("select")) for r in rows])

        @app.post("/rest/v1/{table}")
        async def insert(table: str, request: Request) -> Response:
            body = await body_of(request)
            if refusal := self._check(request, body):
                return refusal
            if table != self.table:
                return _error(404, f'relation "public.{table}" does not exist', "42P01")
            incoming = body if isinstance(body, list) else [body]
            merge = "resolution=merge-duplicates" in request.headers.get("prefer", "")
            keys = [k.strip() for k in request.query_params.get("on_conflict", "source,chunk_index").split(",")]
            for row in incoming:
                if len(row.get("embedding") or []) != self.dims:
                    return _error(400, f"expected {self.dims} dimensions", "22000")
                existing = next((r for r in self.rows if all(r.get(k) == row.get(k) for k in keys)), None)
                if existing is None:
                    self._insert(row)
                elif merge:
                    existing.update(row)
                else:
                    return _error(409, "duplicate key value violates unique constraint", "23505")
            return Response(status_code=201)

        @app.delete("/rest/v1/{table}")
        async def delete(table: str, request: Request) -> Response:
            if refusal := self._check(request, None):
                return refusal
            if table != self.table:
                return _error(404, f'relation "public.{table}" does not exist', "42P01")
            params = dict(request.query_params)
            filters = {k: v for k, v in params.items() if k not in CONTROL_PARAMS}
            if not filters:
                return _error(400, "DELETE requires a WHERE clause", "21000")
            gone = [r for r in self.rows if _matches(r, filters)]
            self.rows = [r for r in self.rows if not _matches(r, filters)]
            if "return=representation" in request.headers.get("prefer", ""):
                return JSONResponse([_render(r, params.get("select")) for r in gone])
            return Response(status_code=204)

        return app
