"""The shared pipeline fixtures (tests/pipelines.py); `ScriptedStt` stays importable from here."""

from tests.pipelines import PipelineFactory, ScriptedStream, ScriptedStt, config, make_pipeline

__all__ = ["PipelineFactory", "ScriptedStream", "ScriptedStt", "config", "make_pipeline"]
