"""`voicegate config init [PATH]`: a copy of the documented defaults to start a deployment's config from.

The text is the package's own internal/config/config.toml (every key, its default, a one-line meaning),
so an installed voicegate writes exactly what a checkout's ./config.toml says, under a header naming
the version whose defaults these are.
"""

from __future__ import annotations

import os
from pathlib import Path

from voicegate.internal.config import DEFAULT_CONFIG
from voicegate.server.version import package_version

HEADER = """# Written by `voicegate config init` (voicegate {version}). Every key below is set to that version's
# default: change what you need, and delete the keys you leave alone if they should follow the defaults of
# later versions instead.

"""


class ConfigInitError(Exception):
    """The file cannot be written; the message says why and what to do instead."""


def default_config_text() -> str:
    return HEADER.format(version=package_version()) + DEFAULT_CONFIG.read_text(encoding="utf-8")


def write_default_config(path: Path, *, overwrite: bool = False) -> Path:
    """Write the commented defaults to `path`, whole or not at all; an existing file is kept unless
    `overwrite`, since it is most likely someone's edited config."""
    if path.is_dir():
        raise ConfigInitError(f"{path} is a directory; give a file name, e.g. {path / 'config.toml'}")
    if path.exists() and path.resolve() == Path(str(DEFAULT_CONFIG)).resolve():
        # A checkout's ./config.toml is a link to the package's defaults: --force would replace the link
        # with a file, and the defaults' one copy with two.
        raise ConfigInitError(f"{path} is voicegate's own default config ({DEFAULT_CONFIG}); write your copy "
                              "to another file, e.g. `voicegate config init my.toml`")
    if path.exists() and not overwrite:
        raise ConfigInitError(f"{path} exists; give another PATH, or add --force to overwrite it")
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(default_config_text(), encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ConfigInitError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
