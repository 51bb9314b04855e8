"""SRTP and SRTCP for one call (RFC 3711), with libsrtp through pylibsrtp.

The RTP session calls `protect` on every packet it sends and `unprotect` on every packet it receives
once the call's SDP agreed on keys (internal/sip/sdes.py). A packet that fails authentication or the
replay check is dropped and counted: it is either forged, damaged, or a replay, and never audio.
"""

from __future__ import annotations

import pylibsrtp

_PROFILES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}


class SrtpContext:
    """Both directions of one call: we encrypt with `local_key`, the peer with `remote_key`."""

    def __init__(self, suite: str, local_key: bytes, remote_key: bytes, *,
                 sending: pylibsrtp.Session | None = None) -> None:
        profile = _PROFILES[suite]
        self.suite = suite
        self.local_key = local_key
        self._tx = sending or pylibsrtp.Session(pylibsrtp.Policy(
            key=local_key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND, srtp_profile=profile))
        # Any SSRC: the peer picks its own, and may change it (a transfer, a new media source).
        self._rx = pylibsrtp.Session(pylibsrtp.Policy(key=remote_key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_INBOUND,
                                                      srtp_profile=profile))
        self.remote_key = remote_key
        self.rejected = 0  # received packets dropped: authentication or replay check failed

    def with_remote(self, remote_key: bytes) -> SrtpContext:
        """The peer's new key, with our sending session kept as it is. A fresh sending session with the
        same key would count from zero again (the SRTCP index restarts at 1, the RTP rollover counter at
        0), so two packets would be encrypted with one keystream: the XOR of their ciphertexts is the XOR
        of their plaintexts. A new local key needs a new context instead."""
        context = SrtpContext(self.suite, self.local_key, remote_key, sending=self._tx)
        context.rejected = self.rejected
        return context

    def __repr__(self) -> str:
        return f"SrtpContext(suite={self.suite!r}, rejected={self.rejected})"

    def protect(self, packet: bytes) -> bytes:
        """Raises OSError when libsrtp refuses, so senders treat it like a failed send (the frame is lost)."""
        try:
            return self._tx.protect(packet)
        except pylibsrtp.Error as exc:
            raise OSError(f"SRTP protect failed: {exc}") from None

    def protect_rtcp(self, packet: bytes) -> bytes:
        try:
            return self._tx.protect_rtcp(packet)
        except pylibsrtp.Error as exc:
            raise OSError(f"SRTCP protect failed: {exc}") from None

    def unprotect(self, packet: bytes) -> bytes | None:
        try:
            return self._rx.unprotect(packet)
        except pylibsrtp.Error:
            self.rejected += 1
            return None

    def unprotect_rtcp(self, packet: bytes) -> bytes | None:
        try:
            return self._rx.unprotect_rtcp(packet)
        except pylibsrtp.Error:
            self.rejected += 1
            return None
