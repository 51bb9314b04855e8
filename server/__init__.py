"""voicegate's composition root: the application factory and the `voicegate` command."""

from voicegate.server.app import create_gateway_application

__all__ = ["create_gateway_application"]
