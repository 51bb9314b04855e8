"""Concurrent WebRTC sessions one process carries."""
