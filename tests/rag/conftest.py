"""RAG fixtures: the offline embedder, a migrated real PostgreSQL, and a small help-desk corpus."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from voicegate.internal.config.providers import PgvectorConfig
from voicegate.internal.db import Database
from voicegate.internal.rag.embedding import WordLlamaEmbedder

CORPUS = {
    "hours.md": (
        "# Opening hours\n\n"
        "We are open Monday to Friday from 9am to 6pm, on Saturday from 10am to 4pm, "
        "and on Sunday from 11am to 3pm. We are closed on public holidays.\n"
    ),
    "refunds.txt": (
        "Refund policy. You can return any item within 30 days of purchase for a full refund. "
        "Bring the receipt; the money goes back to the card you paid with.\n"
    ),
    "parking.md": (
        "# Parking\n\n"
        "Free parking for customers is behind the building. The car park entrance is on Mill Street, "
        "and spaces for disabled drivers are next to the door.\n"
    ),
    "menu.csv": "item,price,size\nEspresso,2.50,small\nCappuccino,3.20,large\n",
}


@pytest.fixture(scope="session")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture
async def database(fresh_db: str, tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(PgvectorConfig(connection_string=fresh_db), tmp_path)
    await db.open()
    yield db
    await db.close()


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    directory = tmp_path / "corpus"
    directory.mkdir()
    paths = {}
    for name, text in CORPUS.items():
        paths[name] = directory / name
        paths[name].write_text(text, encoding="utf-8")
    return paths
