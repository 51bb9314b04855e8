"""Capacity with real conversations: how many talking callers one node (or two behind Kamailio) serves."""
