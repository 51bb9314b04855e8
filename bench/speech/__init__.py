"""Speech recognition: word errors and cost per engine, on clean and noisy lines; noise suppression's cost."""
