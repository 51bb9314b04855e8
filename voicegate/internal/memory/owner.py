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
from dataclasses import dataclass
from pathlib import Path

from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.adapters import AdaptedProvider

SECRET_FILE = "owner-key.secret"
_FINGERPRINT_LABEL = b"voicegate owner-key fingerprint v1"


class OwnerKeySecretError(Exception):
    """The owner-key secret is missing or is not the one the stored memory was written with."""


@dataclass(frozen=True, slots=True)
class OwnerSecret:
    value: bytes
    source: str  # "memory.owner_key_secret" or the absolute path of the secret file
    created: bool  # generated now: nothing can have been stored under it yet
    path: Path | None = None  # where a generated secret is written once it is accepted


def read_secret(configured: str, data_dir: Path) -> OwnerSecret:
    """The configured secret, else the one in the data directory, else a new one (not yet written:
    `keep()` writes it once the store has confirmed it replaces nothing)."""
    if configured:
        return OwnerSecret(configured.encode(), "memory.owner_key_secret", False)
    path = (data_dir / SECRET_FILE).resolve()
    if path.exists():
        value = path.read_bytes().strip()
        if not value:
            raise OwnerKeySecretError(f"the owner-key secret file {path} is empty; restore it from your backup")
        return OwnerSecret(value, str(path), False)
    return OwnerSecret(secrets.token_hex(32).encode(), str(path), True, path)


def keep(secret: OwnerSecret) -> None:
    """Write a newly generated secret to its file (mode 0600), never over an existing one."""
    if not secret.created or secret.path is None:
        return
    secret.path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(secret.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created one first: use theirs, never ours
        raise OwnerKeySecretError(f"the owner-key secret file {secret.path} appeared while starting; "
                                  "start again") from None
    with os.fdopen(descriptor, "wb") as out:
        out.write(secret.value)


def fingerprint(secret: bytes) -> str:
    """What the database records of the secret: proves a match, reveals nothing of it."""
    return hmac.new(secret, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:32]


def secret_problem(secret: OwnerSecret, recorded: str | None, stored_owners: int) -> str | None:
    """Why this secret must not be used with this store, or None when it may.

    - a secret generated just now while owners are stored: their keys were made with a secret that is
      gone (a lost file, or a run from another directory); a new one would silently orphan them;
    - a recorded fingerprint that does not match while owners are stored: the wrong secret.
    With nothing stored, any secret is fine (the caller of this records its fingerprint).
    """
    if stored_owners == 0:
        return None
    where = ("memory.owner_key_secret (VOICEGATE_MEMORY__OWNER_KEY_SECRET)" if secret.source.startswith("memory.")
             else f"the file {secret.source}")
    if secret.created:
        return (f"the owner-key secret file {secret.source} is missing, but the memory store holds "
                f"{stored_owners} caller(s) written with a secret. Restore the file from your backup, run "
                "from the directory (or with the server.data_dir) that holds it, or set "
                "memory.owner_key_secret; a new secret would make every stored caller unreachable "
                "(docs/memory.md, 'The owner-key secret')")
    if recorded is not None and recorded != fingerprint(secret.value):
        return (f"the owner-key secret in {where} is not the one the {stored_owners} stored caller(s) were "
                "written with. Restore the right secret (from your backup, or the server.data_dir that "
                "holds it); see docs/memory.md, 'The owner-key secret'")
    return None


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


async def verify_secret(store: AdaptedProvider, secret: OwnerSecret) -> None:
    """Check `secret` against what `store` recorded (raises OwnerKeySecretError with the fix), then
    write a newly generated secret's file and record its fingerprint."""
    if not store.records_key_fingerprint:  # this store cannot tell; nothing to compare against
        keep(secret)
        return
    recorded = await store.key_fingerprint()
    problem = secret_problem(secret, recorded, await store.stored_owner_count())
    if problem:
        raise OwnerKeySecretError(problem)
    keep(secret)
    if recorded != fingerprint(secret.value):
        await store.set_key_fingerprint(fingerprint(secret.value))
