"""Phone flows as small state machines driven by a call's events: digit collection (digits.py,
collection.py, digit_tool.py), answering-machine detection (amd.py, beep.py, answering_machine.py) and
warm transfer's rules and media (warm_transfer.py, leg_media.py; the SIP side is
internal/sip/voice/warm_transfer.py). The rules are pure functions of plain values; the runtimes hold
the pipeline's caller input (internal/pipeline/capture.py) while they run."""
