"""Signatures already verified on this machine, remembered by exact bytes, so attaching a bundle
again need not import model-signing and sigstore (about a second at start-up).

A verdict is keyed by SHA-256 over the bundle's file digests (every file but the signature)
and the signature file's bytes; it records the key that verified it. It is used only while that
very key (same id, same PEM) is still accepted, so changing any byte of any file or of the
signature, or no longer trusting the key, means a full check by `verify_digests` again. Only
attach uses it (`policy.check_attach`); `hub verify` and the registry always check in full.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hubcli.fsutil import atomic_write_text, read_json_cache
from hubcli.settings import VERIFIED_FILE, home_path
from hubcli.signing.trust import TrustedKey

MAX_RECORDS = 1000


def _path() -> Path:
    return home_path(VERIFIED_FILE)


def fingerprint(digests: dict[str, str], signature: bytes) -> str:
    """What a verdict is keyed by: the file digests and the signature's bytes."""
    doc = json.dumps(sorted(digests.items())).encode() + b"\0" + signature
    return hashlib.sha256(doc).hexdigest()


def _pem_digest(key: TrustedKey) -> str:
    return hashlib.sha256(key.public_key.encode()).hexdigest()


def cached_signer(digests: dict[str, str], signature: bytes,
                  candidates: list[TrustedKey]) -> TrustedKey | None:
    """The candidate that verified exactly these bytes before, if it is still a candidate."""
    entry = read_json_cache(_path()).get(fingerprint(digests, signature))
    if not isinstance(entry, dict):
        return None
    for key in candidates:
        if key.key_id == entry.get("key_id") and _pem_digest(key) == entry.get("public_key"):
            return key
    return None


def remember(digests: dict[str, str], signature: bytes, key: TrustedKey) -> None:
    """Record that `key` verified these exact bytes (the oldest records are dropped)."""
    records = read_json_cache(_path())
    records.pop(fingerprint(digests, signature), None)
    records[fingerprint(digests, signature)] = {"key_id": key.key_id,
                                                "public_key": _pem_digest(key)}
    kept = dict(list(records.items())[-MAX_RECORDS:])
    atomic_write_text(_path(), json.dumps(kept, indent=1) + "\n")
