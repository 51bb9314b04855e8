"""The reliability suite reuses the pipeline fixtures (a pipeline with real local engines).

Under `make soak` (VOICEGATE_SOAK=N) every test here does N times the work, so its timeout is N times
pytest's (a test's own `timeout` marker wins).
"""

from pathlib import Path

import pytest

from tests.pipeline.conftest import config, make_pipeline
from tests.reliability.scale import SOAK, scaled_timeout

__all__ = ["config", "make_pipeline"]
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SOAK <= 1:
        return
    base = float(config.getini("timeout") or 300)
    for item in items:
        if HERE in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(scaled_timeout(base)))
