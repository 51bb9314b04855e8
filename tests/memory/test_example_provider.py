"""The example external provider in examples/ keeps working with the runtime (so the template never rots)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.memory.conftest import make_runtime
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.runtime import StaleRevision


def load_example() -> type:
    spec = importlib.util.spec_from_file_location("sqlite_memory_provider",
                                                  REPO / "examples" / "sqlite_memory_provider.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.SqliteMemoryProvider  # type: ignore[no-any-return]


async def test_the_example_provider_round_trips_through_the_runtime(tmp_path: Path) -> None:
    provider = load_example()(tmp_path / "memory.sqlite3")
    runtime = make_runtime(provider, tmp_path)
    owner = runtime.owner_key(CallerIdentity("jwt", "alice"))
    assert owner is not None and runtime.capabilities.semantic_query
    await runtime.edit(owner, "memory", "append", content="- Likes green tea.\n- Has a dog named Rex.",
                       context=ChangeContext("api"))
    assert await runtime.query(owner, "what is the dog called", 1) == ["Has a dog named Rex."]
    with pytest.raises(StaleRevision):
        await runtime.edit(owner, "memory", "append", content="- x", expected_revision=0, context=ChangeContext("api"))
    assert (await runtime.delete_owner(owner))["documents"] == 1
    await provider.close()
