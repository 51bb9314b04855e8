"""The conversation a call keeps across reconnects: its messages (messages.py), history, transcript and
rolling summary (state.py)."""
