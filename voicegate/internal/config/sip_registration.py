"""`[[sip.registrations]]`: accounts voicegate registers with, so a PBX or provider can reach it
without a static IP (RFC 3261 section 10: the registrar learns where we are from our REGISTER).

Kept apart from sections.py because a registration is an account, with its own secret and its own
checks, not a knob of the SIP transport.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voicegate.internal.sip_grammar.uri import UriError, sip_uri_with_host

# RFC 3261 10.2.1 lets a registrar shorten what we ask for (and 423 lets it ask for more), so these
# bounds only stop a typo: under a minute is a refresh storm, over a day outlives most NAT bindings.
MIN_EXPIRES_S = 60
MAX_EXPIRES_S = 86400


class SipRegistration(BaseModel):
    """One account at one registrar; see docs/sip.md "Registration"."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    registrar: str
    username: str = Field(min_length=1)
    password: str = ""
    # The name of an environment variable holding the password: pydantic-settings cannot address one
    # element of an array of tables from the environment, so a secret kept out of the file needs this.
    password_env: str = ""
    expires: int = Field(3600, ge=MIN_EXPIRES_S, le=MAX_EXPIRES_S)
    auth_username: str = ""
    contact_user: str = ""
    outbound_proxy: str = ""
    transport: str = ""  # "" = the registrar URI's transport parameter, else the first of sip.transports

    @model_validator(mode="before")
    @classmethod
    def _password_from_env(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("password_env"):
            return data
        name = str(data["password_env"])
        if data.get("password"):
            raise ValueError("set password or password_env, not both")
        value = os.environ.get(name, "")
        if not value:
            raise ValueError(f"password_env names {name!r}, which is not set in the environment")
        return {**data, "password": value}

    @field_validator("registrar")
    @classmethod
    def _registrar_is_sip_uri(cls, value: str) -> str:
        return check_sip_uri(value, "registrar")

    @field_validator("outbound_proxy")
    @classmethod
    def _proxy_is_sip_uri(cls, value: str) -> str:
        return check_sip_uri(value, "outbound_proxy") if value else value

    @field_validator("transport")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()

    @property
    def auth_user(self) -> str:
        return self.auth_username or self.username

    @property
    def label(self) -> str:
        """How logs, /health and /metrics name this registration (never with the password)."""
        return f"{self.username}@{self.registrar}"

    def __repr__(self) -> str:
        return f"SipRegistration({self.label!r}, expires={self.expires})"

    __str__ = __repr__


def check_sip_uri(value: str, key: str) -> str:
    try:
        sip_uri_with_host(value)
    except UriError as exc:
        raise ValueError(f"{key} must be a sip: or sips: URI with a host, such as \"sip:pbx.example:5060\" "
                         f"({exc})") from None
    return value


def check_registration_transports(registrations: Sequence[SipRegistration], enabled: Sequence[str]) -> None:
    """Each registration's transport must be one sip.transports enables: we could not send on another."""
    for index, registration in enumerate(registrations):
        if registration.transport and registration.transport not in enabled:
            raise ValueError(
                f"registrations.{index}.transport: {registration.transport!r} is not one of sip.transports "
                f"{list(enabled)}"
            )
