"""The turn's tests drive real pipelines too: the shared fixtures (tests/pipelines.py)."""

from tests.pipelines import config, make_pipeline

__all__ = ["config", "make_pipeline"]
