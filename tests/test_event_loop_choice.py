"""server.event_loop: asyncio's loop unless uvloop is asked for and installed; a missing uvloop never stops
a node from starting."""

from __future__ import annotations

import asyncio
import logging
import sys
import types

import pytest

from voicegate.internal.config import Config
from voicegate.server.event_loop import event_loop_factory


def test_asyncio_is_the_default_and_uses_asyncio_s_own_loop() -> None:
    assert Config().server.event_loop == "asyncio"
    assert event_loop_factory("asyncio") is None


def test_uvloop_asked_for_but_missing_is_a_warning_and_asyncio(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of it raises ImportError
    with caplog.at_level(logging.WARNING):
        assert event_loop_factory("uvloop") is None
        assert event_loop_factory("auto") is None
    assert [r.message for r in caplog.records if "uvloop is not installed" in r.message] != []
    assert len(caplog.records) == 1  # "auto" without uvloop is not worth a warning


def test_an_installed_uvloop_makes_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[asyncio.AbstractEventLoop] = []

    def new_event_loop() -> asyncio.AbstractEventLoop:
        made.append(asyncio.new_event_loop())
        return made[-1]

    monkeypatch.setitem(sys.modules, "uvloop", types.SimpleNamespace(new_event_loop=new_event_loop))
    factory = event_loop_factory("auto")
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(asyncio.sleep(0, "ran")) == "ran"
    assert len(made) == 1
