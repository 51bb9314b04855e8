"""`stop_recording`: the agent stops the call's recording when the caller asks in words no rule caught.

Without it a model that was never told about recording may answer "I have stopped recording" while
nothing stopped. With it, the tool's result says what is true: stopped (and the call's recording
deleted, as an opt-out does), or that the call was not being recorded. The model cannot start a
recording: only the caller's consent does (docs/recording.md).
"""

from __future__ import annotations

import json
from typing import Any

from voicegate.internal.conversation.slots import slots_of
from voicegate.internal.recording.call import ConsentedRecording
from voicegate.internal.recording.service import RECORDING_KEY
from voicegate.internal.tools.registry import ToolContext, ToolRegistry


def _recording(context: ToolContext) -> ConsentedRecording | None:
    slots = slots_of(context.extras.get("session"))
    return slots.get(RECORDING_KEY) if slots is not None else None


def register_recording_tool(registry: ToolRegistry) -> None:
    if "stop_recording" in registry:  # a registry handed to a gateway started again
        return

    async def stop_recording(arguments: dict[str, Any], context: ToolContext) -> str:
        recording = _recording(context)
        if recording is not None and recording.stop_requested():
            return json.dumps({"ok": True, "stopped": True, "deleted": True,
                               "note": "Recording has stopped and what was recorded of this call is deleted."})
        return json.dumps({"ok": True, "stopped": False,
                           "note": "This call is not being recorded, so there was nothing to stop."})

    registry.register(
        "stop_recording",
        "Stop recording this call and delete what was recorded, when the caller asks not to be recorded. "
        "Only this tool can stop the recording, and nothing can start one: never tell the caller it has "
        "stopped unless this tool said so.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        stop_recording,
        available=lambda context: _recording(context) is not None,
        ledger=False,
    )
