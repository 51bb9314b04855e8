"""The conversation a call keeps across reconnects: history, transcript, rolling summary (state.py)."""
