"""One wheel per test process, built from this tree (tests/package/wheel.py)."""

from __future__ import annotations

import pytest

from tests.package.wheel import BuiltWheel, build_wheel


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    return build_wheel(tmp_path_factory.mktemp("wheel"))
