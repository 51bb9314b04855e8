"""Docs are part of the feature: every config key is documented, and the docs match config.toml."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from pydantic import BaseModel

from tests.conftest import REPO
from voicegate.internal.config import DEFAULT_CONFIG, Config


def key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for name, field in model.model_fields.items():
        annotation: Any = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and name not in ("ice_servers",):
            paths += key_paths(annotation, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def test_every_key_is_in_config_toml_and_in_the_configuration_doc() -> None:
    toml = DEFAULT_CONFIG.read_text()  # what `voicegate config init` writes; ./config.toml links to it
    doc = (REPO / "docs" / "configuration.md").read_text()
    for path in key_paths(Config):
        *sections, key = path.split(".")
        env = "VOICEGATE_" + "__".join(p.upper() for p in path.split("."))
        assert f"[{'.'.join(sections)}]" in toml, path
        assert f"\n{key} = " in toml, f"{path} is not in config.toml"
        assert f"`{env}`" in doc, f"{path} is not in docs/configuration.md"


def test_configuration_doc_tables_are_generated_from_config_toml() -> None:
    result = subprocess.run([sys.executable, "scripts/config_reference.py", "--check"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
