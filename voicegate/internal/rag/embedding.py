"""Text embeddings for memory recall and knowledge retrieval, all in one vector size.

Every embedder produces EMBEDDING_DIMS-dimensional vectors, so one `vector(256)` column serves all:
wordllama (offline, numpy only, 256 dims natively) and OpenAI-compatible endpoints (asked for 256
dimensions, which text-embedding-3-* models support).
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from voicegate.internal.config.providers import OpenAIConfig

EMBEDDING_DIMS = 256
Vector = npt.NDArray[np.float32]


class EmbeddingError(Exception):
    pass


class Embedder(Protocol):
    name: str
    dims: int

    async def embed(self, texts: list[str]) -> list[Vector]: ...


class WordLlamaEmbedder:
    """wordllama's bundled 256-dimension model, loaded from site-packages (never from the network)."""

    name = "wordllama"
    dims = EMBEDDING_DIMS
    model_name = "l2_supercat"  # wordllama's default model, at 256 dimensions

    def __init__(self) -> None:
        import wordllama

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._model = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)

    def embed_sync(self, texts: list[str]) -> list[Vector]:
        if not texts:
            return []
        matrix = np.asarray(self._model.embed(texts), dtype=np.float32).reshape(len(texts), -1)
        return [row for row in matrix]

    async def embed(self, texts: list[str]) -> list[Vector]:
        # A few sentences take well under a millisecond; a batch at ingest time goes to a thread.
        if len(texts) <= 16:
            return self.embed_sync(texts)
        return await asyncio.to_thread(self.embed_sync, texts)


class OpenAIEmbedder:
    name = "openai"
    dims = EMBEDDING_DIMS

    def __init__(self, config: OpenAIConfig, *, base_url: str = "", api_key: str = "") -> None:
        from openai import AsyncOpenAI

        self._model = config.embedding_model
        self.model_name = config.embedding_model
        self._client = AsyncOpenAI(base_url=(base_url or config.base_url).rstrip("/"),
                                   api_key=api_key or config.api_key or "unused", timeout=config.timeout_s,
                                   max_retries=1)

    async def embed(self, texts: list[str]) -> list[Vector]:
        if not texts:
            return []
        try:
            response = await self._client.embeddings.create(model=self._model, input=texts, dimensions=self.dims)
        except Exception as exc:
            raise EmbeddingError(f"embedding request failed ({type(exc).__name__})") from None
        vectors = [np.asarray(item.embedding, dtype=np.float32) for item in response.data]
        if any(v.shape != (self.dims,) for v in vectors):
            raise EmbeddingError(f"the embedding endpoint did not return {self.dims}-dimensional vectors")
        return vectors

    async def aclose(self) -> None:
        """Release the HTTP connection pool (its owner calls this once, at shutdown)."""
        await self._client.close()


def embedder_identity(embedder: Embedder) -> str:
    """Which model made a vector ("wordllama/l2_supercat", "openai/text-embedding-3-small"): vectors
    of different models are not comparable, so stored knowledge records it."""
    return f"{embedder.name}/{getattr(embedder, 'model_name', '')}"


def build_embedder(kind: str, openai: OpenAIConfig) -> Embedder | None:
    if kind == "none":
        return None
    if kind == "openai":
        return OpenAIEmbedder(openai)
    return WordLlamaEmbedder()
