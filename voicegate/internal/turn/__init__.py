"""The caller's turn: the VAD (vad.py, with Silero in silero.py), the end-of-turn model and its fusion with the
words (smart_turn.py, fusion.py), the pure policy that decides when a turn is over and what a sound over the
agent was (policy.py, bargein.py, text_cues.py, pauses.py, idle.py), and the TurnOwner that applies it
(owner.py, on the state machine of state.py), talking to the rest of the call through ports.py.
The phone-band end-of-turn head runs inside the recogniser and lives beside it (internal/stt/phone_turn.py)."""
