"""Bring your own agent: the deployer's HTTP endpoint as the conversation's brain."""

from voicegate.internal.agent.client import AgentChatModel

__all__ = ["AgentChatModel"]
