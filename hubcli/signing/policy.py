"""May this adapter folder be attached? Trusted signature, or trained on this machine, or the
user allowed unsigned adapters. Decided before any weight is loaded; torch-free.

Adapters you trained yourself are remembered by content (SHA-256 of the weights file and
manifest.json) in `$HUB_HOME/trained.json`, so train -> predict works without signing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from hubcli.format import manifest as manifest_io
from hubcli.format.bundle_rules import (SIGNATURE, check_listed_files, check_names,
                                        check_weights, hash_files, list_files)
from hubcli.errors import NoSignatureError, UntrustedSignerError
from hubcli.fsutil import atomic_write_text, sha256_file
from hubcli.format.manifest import MANIFEST, WEIGHTS_FILES, weights_file
from hubcli.settings import TRAINED_FILE, home_path
from hubcli.signing import trust, verdicts
from hubcli.signing.verify import check_signer_claim, signer_name, verify_digests

# Enough for any realistic history; keeps the file (read on every attach) small.
MAX_RECORDS = 1000


@dataclass(frozen=True)
class VerifiedBundle:
    """An adapter folder checked once, by `check_attach`: signature (or why it may be attached
    without one), file digests, manifest and weights header. Loading and attaching take this
    value, so nothing in the folder is read, parsed or hashed a second time."""

    directory: Path
    manifest: dict[str, Any]  # validated against the schema, consistent with the files
    digests: dict[str, str]  # file name -> hex SHA-256, the signature excluded
    status: Literal["trusted", "self-trained", "unsigned-allowed"]
    key_id: str | None
    signer_name: str | None
    message: str  # one line for the caller to print
    # a composed adapter's components (its manifest's `requires`, in order), each verified
    # likewise and pinned by manifest digest; filled in by `hubcli.local.compose`
    components: tuple[VerifiedBundle, ...] = ()


def _trained_path() -> Path:
    return home_path(TRAINED_FILE)


def _records() -> list[dict[str, Any]]:
    try:
        records = json.loads(_trained_path().read_text(encoding="utf-8"))["adapters"]
    except (OSError, ValueError, KeyError, TypeError):
        # A lost or damaged record only means more adapters need a signature: fail safe.
        return []
    return records if isinstance(records, list) else []


def record_trained(directory: Path) -> None:
    """Remember the adapter in `directory` as trained here (replacing an older record of the
    same folder). Called by `hub train` after writing, and by `hub bundle`."""
    directory = Path(directory)
    weights = next((n for n in WEIGHTS_FILES if (directory / n).is_file()), WEIGHTS_FILES[0])
    entry = {"adapter_sha256": sha256_file(directory / weights),
             "manifest_sha256": sha256_file(directory / MANIFEST),
             "path": str(directory.resolve()),
             "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    kept = [r for r in _records() if isinstance(r, dict) and r.get("path") != entry["path"]]
    data = {"version": 1, "adapters": (kept + [entry])[-MAX_RECORDS:]}
    atomic_write_text(_trained_path(), json.dumps(data, indent=1) + "\n")


def is_self_trained(adapter_sha256: str | None, manifest_sha256: str | None) -> bool:
    """Whether an adapter with these file digests was recorded by `record_trained`."""
    return any(isinstance(r, dict) and r.get("adapter_sha256") == adapter_sha256
               and r.get("manifest_sha256") == manifest_sha256 for r in _records())


def check_attach(directory: Path, *, allow_unsigned: bool = False,
                 extra_public_keys: Iterable[bytes] = ()) -> VerifiedBundle:
    """Decide whether the adapter in `directory` may be attached, checking its signature
    (trust store plus `extra_public_keys`, e.g. keys a registry advertises for a namespace),
    its file digests and its weights header. Each file is hashed once, the manifest validated
    once; the result carries all of it (see `VerifiedBundle`).

    Raises:
        NoSignatureError, UntrustedSignerError: unsigned/untrusted, not trained here, and
            `allow_unsigned` is false.
        InvalidSignatureError, TamperedError: a signature that does not verify, or files that
            changed after signing; refused even with `allow_unsigned`.
        ManifestError: manifest.json is missing or invalid (checked first).
        BundleError: the folder is malformed or its digests do not match.
    """
    directory = Path(directory)
    # The manifest first: pointed at a folder that is no adapter at all, a user needs "no
    # manifest.json here", not "not signed". Parsed and validated here only, once.
    manifest = manifest_io.read(directory)
    sizes = list_files(directory)
    digests = hash_files(directory, sizes)
    try:
        key = _verified_signer(directory, trust.accepted_keys(extra_public_keys), digests)
    except (NoSignatureError, UntrustedSignerError) as refusal:
        key, (status, message) = None, _unverified(directory, digests.get(weights_file(manifest)),
                                                   digests.get(MANIFEST), refusal, allow_unsigned)
    check_names(directory, sizes)
    check_listed_files(directory, manifest, sizes, digests)
    check_weights(directory, manifest)
    if key is None:
        return VerifiedBundle(directory, manifest, digests, status, None, None, message)
    check_signer_claim(directory, manifest.get("signer", {}), key)
    name = signer_name(key, manifest)
    return VerifiedBundle(directory, manifest, digests, "trusted", key.key_id, name,
                          f"verified: {directory} is signed by "
                          f"{trust.signer_label(name, key.key_id)}")


def _verified_signer(directory: Path, candidates: list[trust.TrustedKey],
                     digests: dict[str, str]) -> trust.TrustedKey:
    """The key that signed, from the verdict cache when these exact bytes verified before
    (signing.verdicts), else by a full `verify_digests`, whose success is then remembered.

    Raises:
        NoSignatureError, UntrustedSignerError, InvalidSignatureError, TamperedError.
    """
    try:
        signature = (directory / SIGNATURE).read_bytes()
    except OSError:
        signature = None  # verify_digests says what is wrong
    if signature is not None:
        key = verdicts.cached_signer(digests, signature, candidates)
        if key is not None:
            return key
    key = verify_digests(directory, candidates, digests)
    if signature is not None:
        verdicts.remember(digests, signature, key)
    return key


def _unverified(directory: Path, weights_sha256: str | None, manifest_sha256: str | None,
                refusal: NoSignatureError | UntrustedSignerError,
                allow_unsigned: bool) -> tuple[Literal["self-trained", "unsigned-allowed"], str]:
    """(status, message) for an adapter that may be attached without a trusted signature.

    Raises:
        NoSignatureError, UntrustedSignerError: `refusal`, when it may not.
    """
    what = ("not signed" if isinstance(refusal, NoSignatureError)
            else "signed by a key that is not trusted")
    if is_self_trained(weights_sha256, manifest_sha256):
        return ("self-trained", f"notice: {directory} is {what}; using it because you made "
                "it on this machine: hub train, fuse or import (sign it with `hub sign` before "
                "sharing it)")
    if allow_unsigned:
        return ("unsigned-allowed", f"warning: {directory} is {what}; attaching it anyway "
                "because of --allow-unsigned")
    refusal.hint = f"{refusal.hint}; or pass --allow-unsigned to use it anyway"
    raise refusal
