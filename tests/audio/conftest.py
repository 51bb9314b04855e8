"""Fixtures for the audio tests."""

from tests.audio.pcap import sipp_pcaps_installed

__all__ = ["sipp_pcaps_installed"]
