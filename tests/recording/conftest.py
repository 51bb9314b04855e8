"""The recording tests reuse the pipeline fixtures (a pipeline with real local engines)."""

from tests.pipeline.conftest import config, make_pipeline

__all__ = ["config", "make_pipeline"]
