"""`[mcp]` and `[[mcp.servers]]`: tools from Model Context Protocol servers (docs/tools.md).

Kept apart from sections.py because a server is an account with its own secrets and checks, like
`[[sip.registrations]]`. Nothing is offered to the model unless its `tools` allow-list names it (or is
exactly ["*"]): a new tool on somebody else's server must not reach callers by surprise.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voicegate.internal.config.sections import Section

McpTransportKind = Literal["sip", "webrtc", "talk"]
# Which callers a server's tools are offered to (internal/tools/mcp_caller.py): any verified caller, only
# callers verified one way, or everyone, anonymous callers included.
RequiredIdentity = Literal["verified", "jwt", "sip", "trusted_header", "none"]
CallerIdFormat = Literal["opaque", "raw", "none"]
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
ALL_TOOLS = "*"


class McpServerConfig(BaseModel):
    """One MCP server: a program spoken to over stdio (`command`) or a streamable HTTP `url`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    # Header name -> the environment variable holding its value (a token kept out of the file):
    # pydantic-settings cannot address one element of an array of tables from the environment.
    headers_env: dict[str, str] = Field(default_factory=dict)
    tools: list[str] = Field(default_factory=list)
    timeout_s: float = Field(10.0, gt=0, le=300)
    connect_timeout_s: float = Field(15.0, gt=0, le=300)
    enabled_for: list[McpTransportKind] = Field(default_factory=lambda: list[McpTransportKind](["sip", "webrtc"]))
    require_identity: RequiredIdentity = "verified"
    # What the server learns of the caller in each call's _meta (and headers): an opaque stable id, the
    # verified value itself (a phone number, a JWT subject), or the kind only.
    caller_id: CallerIdFormat = "opaque"
    # Tools that start work elsewhere (a ticket, a delivery) -> the tool voicegate asks for its status ("" none):
    # their runs go to the caller's task ledger, whose status `recall` reads live (docs/tools.md).
    task_tools: dict[str, str] = Field(default_factory=dict)
    # Tools known to take seconds (their names on the server): the thinking cue plays as soon as the model
    # calls one, not after pipeline.thinking_cue_after_ms (internal/pipeline/thinking.py).
    slow_tools: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SERVER_NAME.fullmatch(value):
            raise ValueError(f"must be 1-32 letters, digits, '_' or '-' (it prefixes the tools' names), got {value!r}")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc):
            raise ValueError(f"must be an http:// or https:// URL of the server's MCP endpoint, got {value!r}")
        return value

    @field_validator("tools")
    @classmethod
    def _allow_list(cls, values: list[str]) -> list[str]:
        if ALL_TOOLS in values and len(values) > 1:
            raise ValueError('"*" offers every tool the server lists; give it alone, or list tool names')
        if any(not value.strip() for value in values):
            raise ValueError("a tool name is empty")
        return values

    @model_validator(mode="before")
    @classmethod
    def _headers_from_env(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("headers_env"):
            return data
        headers = dict(data.get("headers") or {})
        for header, variable in dict(data["headers_env"]).items():
            if header in headers:
                raise ValueError(f"header {header!r} is in both headers and headers_env")
            value = os.environ.get(str(variable), "")
            if not value:
                raise ValueError(f"headers_env names ${variable} for {header!r}, which is not set in the environment")
            headers[header] = value
        return {**data, "headers": headers}

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"server {self.name!r}: set command (stdio) or url (streamable HTTP), exactly one")
        if self.url and (self.args or self.env):
            raise ValueError(f"server {self.name!r}: args and env are for a command, not a url")
        if self.command and self.headers:
            raise ValueError(f"server {self.name!r}: headers are for a url, not a command")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def allows(self, tool: str) -> bool:
        return self.tools == [ALL_TOOLS] or tool in self.tools


class McpConfig(Section):
    servers: list[McpServerConfig] = Field(default_factory=list)
    # A tool's result as the model reads it, fence and notices included (results are untrusted data).
    max_result_chars: int = Field(2000, ge=200, le=8000)
    # Said to the caller when a tool does not answer within its server's timeout_s.
    timeout_notice: str = Field("Sorry, that is taking too long, so I can't check it right now.",
                                min_length=1, max_length=300)

    @field_validator("servers")
    @classmethod
    def _unique_names(cls, servers: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"server names must be unique: {', '.join(duplicates)}")
        return servers
