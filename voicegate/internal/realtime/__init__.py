"""A Realtime speech-to-speech model as the agent (docs/realtime.md): the OpenAI Realtime WebSocket protocol
(protocol.py), its client (connection.py) and the pipeline that speaks it on a call (pipeline.py), a
VoicePipeline whose caller audio goes to the model and whose agent audio comes from it."""
