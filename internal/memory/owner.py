"""Owner keys: the storage key of a caller's memory, derived from a verified identity.

The key is an HMAC of the identity's kind and normalised value, so the database never holds a raw phone
number as a key, `jwt:alice` can never collide with `sip:+1555...`, and nobody can compute a caller's
key without the secret. Anonymous callers have no key, hence no memory, read or write.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from internal.identity import CallerIdentity

SECRET_FILE = "owner-key.secret"


def load_or_create_secret(configured: str, data_dir: Path) -> bytes:
    """The configured secret, else one generated once into the data directory (mode 0600)."""
    if configured:
        return configured.encode()
    path = data_dir / SECRET_FILE
    if path.exists():
        return path.read_bytes().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    value = secrets.token_hex(32).encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(value)
    return value


class OwnerKeys:
    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("the owner-key secret is empty")
        self._secret = secret

    def for_identity(self, identity: CallerIdentity) -> str | None:
        resource_id = identity.resource_id
        return None if resource_id is None else self.for_resource_id(resource_id)

    def for_resource_id(self, resource_id: str) -> str:
        """`kind:value` -> a 64-hex-digit key. The value is already normalised by identity resolution."""
        return hmac.new(self._secret, resource_id.encode(), hashlib.sha256).hexdigest()


def audit_hash(owner_key: str) -> str:
    """A short, non-reversible tag of an owner key for audit lines (never the key itself)."""
    return hashlib.sha256(b"audit:" + owner_key.encode()).hexdigest()[:16]
