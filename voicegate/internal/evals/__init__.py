"""`voicegate eval`: scripted callers phone the agent over real SIP or WebRTC and check what it did.

One responsibility per module, from the file to the report:
- `yaml_nodes` and `scenario`: a YAML scenario file into typed Scenario objects, every error naming the
  file, line and key (docs/evals.md is the format).
- `voice` (+ the separate `piper_render` program): the caller's speech from the pinned Piper voice.
- `mouth`, `ear`: the caller's outgoing audio, 20 ms at a time, and what it hears, with times and levels.
- `sip_phone`, `webrtc_phone`: a phone on each transport, built on the product's own SIP stack and
  aiortc; `server_api`: the running server's HTTP API and its call events (server.call_events).
- `conversation`: plays a call's turns against the agent, waiting for replies like a person would.
- `runner`: scenarios in parallel, each call placed and its server-side facts gathered (`results`).
- `verdict`, once every call is over: `replies` (which of the agent's words and sounds answer which
  turn), `hearing` (Whisper on the wire), `checks` (each expectation as a pure function of what was
  recorded) and `judge` (the optional LLM rubric).
- `console`, `junit`, `html_report`: the reports.
"""
