"""The reliability suite reuses the pipeline fixtures (a pipeline with real local engines).

Every test here is part of `make soak` (marked `soak`): those that place calls or send messages by the
thousand do VOICEGATE_SOAK times their full size there (tests/scale.py), and all get the longer timeout.
"""

from pathlib import Path

import pytest

from tests.pipeline.conftest import config, make_pipeline

__all__ = ["config", "make_pipeline"]
HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's, which reads the mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.soak)
