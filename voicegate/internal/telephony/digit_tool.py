"""The `collect_digits` tool: the agent asks for a number and gets back what the caller keyed or said.

The model either names a form the deployer configured ([digits.forms]: "account", "pin", with their
prompts and lengths) or describes one itself (a prompt and the digit counts). The tool speaks the prompt,
runs the form (collection.py) and returns the digits, how they came and in how many attempts, or why it
failed, so the model can say "thanks" or offer another way. Digits go to the model (it may need them to
confirm them), never into events or logs, nor into the arguments of a tool from an MCP server
(form_digits.py). A sensitive form (`sensitive`) pauses the call's recording while it collects, and its
entry reaches the model masked (`result_for_model`): what the model knows it may read back, into the
recording, the transcript and memory; a built-in tool that needs the digits reads them from the call
(form_digits.form_entry). With `digits.forms_only` the model may only name a configured form, never
write a prompt of its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from voicegate.internal.config.telephony import DigitFormConfig, DigitsConfig
from voicegate.internal.conversation.form_digits import masked, remember_entry
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.pipeline.capture import CallControl
from voicegate.internal.recording.call import ConsentedRecording
from voicegate.internal.recording.service import RECORDING_KEY
from voicegate.internal.telephony.collection import collect_digits
from voicegate.internal.telephony.digits import DigitSpec, DigitSpecError
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry

# The turn's timeout is extended by at least this much beyond the form's own worst case (prompts, waits).
DEADLINE_SLACK_S = 10.0
PROMPT_SECONDS = 8.0  # a generous length for one spoken prompt


def form_spec(config: DigitsConfig, form: DigitFormConfig | None, arguments: dict[str, Any]) -> DigitSpec:
    """The spec from the section's defaults, then the named form, then what the model passed."""

    def pick(name: str, default: Any) -> Any:
        value = arguments.get(name)
        if value is None and form is not None:
            value = getattr(form, name, None)
        return default if value is None else value

    terminator = pick("terminator", config.terminator)
    terminator = "" if terminator == "none" else terminator
    prompt = str(pick("prompt", "")).strip()
    if not prompt:
        raise DigitSpecError("a prompt is needed: name a configured form or say what to ask")
    try:
        return DigitSpec(
            prompt=prompt,
            min_digits=int(pick("min_digits", 1)),
            max_digits=int(pick("max_digits", 16)),
            terminator=str(terminator),
            timeout_ms=int(float(pick("timeout_s", config.timeout_s)) * 1000),
            inter_digit_timeout_ms=int(float(pick("inter_digit_timeout_s", config.inter_digit_timeout_s)) * 1000),
            speech_end_ms=int(float(pick("speech_end_s", config.speech_end_s)) * 1000),
            input=pick("input", config.input),
            max_attempts=int(pick("max_attempts", config.max_attempts)),
            retry_prompt=str(pick("retry_prompt", config.retry_prompt)),
        )
    except (TypeError, ValueError) as exc:
        raise DigitSpecError(str(exc)) from None


def sensitive(config: DigitsConfig, form: DigitFormConfig | None) -> bool:
    return form.sensitive if form is not None and form.sensitive is not None else config.sensitive


def recording_paused(session: LiveCall, paused: bool) -> contextlib.AbstractContextManager[None]:
    """The call's recording paused for a sensitive form (silence on both channels), when it records."""
    recording = session.slots.get(RECORDING_KEY)
    return recording.pause() if paused and isinstance(recording, ConsentedRecording) else contextlib.nullcontext()


SENSITIVE_NOTE = ("The entry is sensitive, so you only see it masked; you never learn the digits. Do not ask the "
                  "caller to say them again or read them out. Tools that need the entry get it from the call.")


def result_for_model(digits: str, via: str, attempts: int, sensitive: bool) -> dict[str, Any]:
    """What a completed form tells the model: the digits, or for a sensitive form only their mask (the
    model reads back what it knows, and that is spoken, recorded, shown and remembered)."""
    if not sensitive:
        return {"ok": True, "digits": digits, "via": via, "attempts": attempts}
    return {"ok": True, "digits": masked(digits), "masked": True, "length": len(digits), "via": via,
            "attempts": attempts, "note": SENSITIVE_NOTE}


def worst_case_s(spec: DigitSpec) -> float:
    """How long a form can take: every attempt's prompt, its first wait and its digits' gaps."""
    per_attempt = (PROMPT_SECONDS + spec.timeout_ms / 1000
                   + spec.max_digits * max(spec.inter_digit_timeout_ms, spec.speech_end_ms) / 1000)
    return spec.max_attempts * per_attempt + DEADLINE_SLACK_S


# How the tool finds the call's control (its pipeline, through the CallControl port) from the call it runs in:
# given by the composition root, which knows what a call is (a Session); None where the call has no pipeline.
ControlOf = Callable[[LiveCall], CallControl | None]


def register_digits_tool(registry: ToolRegistry, config: DigitsConfig, control_of: ControlOf) -> None:
    forms = dict(config.forms)
    properties: dict[str, Any] = {
        "prompt": {"type": "string", "description": "what to ask, e.g. 'Please enter your account number "
                   "followed by hash.' (not needed with a form)"},
        "min_digits": {"type": "integer", "minimum": 1, "maximum": 64},
        "max_digits": {"type": "integer", "minimum": 1, "maximum": 64},
        "terminator": {"type": "string", "enum": ["#", "*", "none"], "description": "key that ends the entry"},
        "input": {"type": "string", "enum": ["keys", "speech", "both"], "description": "keypad, voice, or either"},
    }
    if forms:
        properties["form"] = {"type": "string", "enum": sorted(forms), "description": "a configured form"}
    if config.forms_only:  # the model names a form, and that is all it says
        if not forms:
            return
        properties = {"form": properties["form"]}

    async def run(arguments: dict[str, Any], context: ToolContext) -> str:
        session = context.call
        control = control_of(session) if session is not None else None
        if session is None or control is None:
            raise ToolError("digits cannot be collected on this call")
        name = str(arguments.get("form") or "")
        if name and name not in forms:
            raise ToolError(f"no form named {name!r} (configured: {', '.join(sorted(forms)) or 'none'})")
        if config.forms_only and not name:
            raise ToolError(f"only the configured forms may be used: name one ({', '.join(sorted(forms)) or 'none'})")
        form = forms.get(name)
        try:
            spec = form_spec(config, form, arguments if not config.forms_only else {})
        except DigitSpecError as exc:
            raise ToolError(f"cannot collect digits: {exc}") from None
        context.extend_deadline(worst_case_s(spec))
        private = sensitive(config, form)
        with recording_paused(session, private):
            result = await collect_digits(control, spec, context.speak, form=name)
        if result.ok:
            remember_entry(session.slots, result.digits, name)  # never to a tool server (form_digits.py)
            return json.dumps(result_for_model(result.digits, result.via, result.attempts, private), ensure_ascii=False)
        return json.dumps({"ok": False, "reason": result.status, "attempts": result.attempts,
                           "note": "The caller did not give a valid entry. Do not ask again right away; offer "
                                   "another way or ask if they want to try once more."})

    forms_text = f" Configured forms: {', '.join(sorted(forms))}." if forms else ""
    registry.register(
        "collect_digits",
        "Ask the caller for a number (account, PIN, date, menu choice) and wait for them to key it in or say it. "
        "The tool speaks the prompt itself; do not repeat it. Returns the digits." + forms_text,
        {"type": "object", "properties": properties, "additionalProperties": False,
         **({"required": ["form"]} if config.forms_only else {})},
        run,
        # It speaks and waits for the caller: never for a reply that may still be thrown away.
        side_effects=True,
        ledger=False,
    )
