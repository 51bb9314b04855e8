"""The phone flows on the SIP side, wired at start-up: key presses out, warm transfer, AMD metrics, the
recogniser that hears menu prompts whole.

Digit collection (`collect_digits`) is transport-neutral and registered with the other built-in tools
(server/providers.py); what is here needs the SIP user agent.
"""

from __future__ import annotations

from typing import Any

from voicegate.internal.config import Config
from voicegate.internal.sip.voice.dtmf import CallKeypad, register_dtmf_tool
from voicegate.internal.telemetry.otel import Telemetry
from voicegate.internal.telephony.answering_machine import AmdRun


def install_sip_phone_flows(gateway: Any, config: Config, telemetry: Telemetry) -> None:
    """`send_dtmf` and the keypad behind POST /calls/{id}/dtmf; warm transfers beside the cold ones when
    there are transfer targets; AMD decisions counted in /metrics."""
    from voicegate.internal.sip.voice.transfer import CallTransfers, register_transfer_tool
    from voicegate.internal.sip.voice.warm_transfer import WarmTransfers

    assert gateway.sessions is not None
    gateway.sip_keypad = CallKeypad(gateway.sip, gateway.sip_calls)
    register_dtmf_tool(gateway.tools, gateway.sip_keypad, inbound=config.sip.send_dtmf_inbound)
    if config.sip.transfer_targets:
        gateway.sip_transfers = CallTransfers(config.sip, gateway.sip, gateway.sessions.end)
        # The hold music was checked with the other providers (server/providers.py check_providers).
        gateway.sip_warm_transfers = WarmTransfers(config.warm_transfer, gateway.sip_transfers, gateway.sip_calls,
                                                   gateway.sip, gateway.sessions.end)
        register_transfer_tool(gateway.tools, gateway.sip_transfers, gateway.sip_warm_transfers,
                               config.warm_transfer.default_mode)

    def count(run: AmdRun) -> None:
        if run.decision is not None:
            labels = {"result": run.decision.result, "reason": run.decision.reason, "outcome": run.outcome or ""}
            telemetry.amd_decisions.add(1, labels)
            telemetry.amd_decision_ms.record(run.decision.at_ms, {"result": run.decision.result})

    gateway.sip_calls.on_amd_decision = count
    if config.menus.whisper_model:
        from voicegate.internal.telephony.prompt_hearing import PromptHearing

        ears = PromptHearing(config.menus.whisper_model, config.menus.whisper_beam_size, config.whisper,
                             config.data_dir / "models")
        gateway.sip_calls.menu_ears = ears
        gateway.close_at_stop(ears.aclose)
