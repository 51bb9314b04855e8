"""The browser page served at `/` (plain HTML/JS/CSS, no build step)."""

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
