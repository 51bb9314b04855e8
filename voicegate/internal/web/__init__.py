"""The browser page served at `/` (plain HTML/JS/CSS, no build step)."""

from pathlib import Path

# Package data (in the wheel beside this module). A directory on disk, not an importlib.resources
# Traversable, because the static-file server needs one: pip always installs a wheel unpacked.
STATIC_DIR = Path(__file__).parent / "static"
