"""Verifying `model.sig`: which trusted key signed the bundle, and are its files exactly the
signed ones? Each file is hashed once; the digests serve both the signature comparison and the
manifest's "files" check. Torch-free: the registry server calls `verify_signature`.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubcli.format import safejson
from hubcli.format.bundle_rules import (SIGNATURE, check_contents, check_names, hash_files,
                                 list_files)
from hubcli.errors import (InvalidSignatureError, NoSignatureError, TamperedError,
                           UntrustedSignerError)
from hubcli.format.manifest import MANIFEST
from hubcli.signing import keys, trust
from hubcli.signing.trust import TrustedKey

TAMPERED_HINT = ("get an intact copy again; if you changed it on purpose, run `hub bundle` "
                 "and `hub sign` again")


@dataclass(frozen=True)
class VerifyResult:
    directory: Path
    key_id: str
    signer_name: str | None
    manifest: dict[str, Any]

    @property
    def signer_label(self) -> str:
        return trust.signer_label(self.signer_name, self.key_id)


def _claimed_signer(directory: Path) -> dict[str, Any]:
    """manifest.json's "signer", read leniently, where no parsed manifest is at hand: for the
    refusal's message, and `verify_signature`'s claim check."""
    try:
        signer = safejson.loads((directory / MANIFEST).read_text(encoding="utf-8")).get("signer")
    except (OSError, ValueError, AttributeError):
        return {}
    return signer if isinstance(signer, dict) else {}


def _read_signature(path: Path):
    from hubcli.signing import upstream  # ~1 s import; only when there is a signature

    try:
        return upstream.read_signature(path)
    except upstream.READ_ERRORS as e:
        raise InvalidSignatureError(f"{path}: not a Sigstore bundle ({type(e).__name__})",
                                    hint=TAMPERED_HINT) from None


def _untrusted(directory: Path, hint: str | None) -> UntrustedSignerError:
    claim = _claimed_signer(directory)
    if claim.get("key_id"):
        who = f"{MANIFEST} names signer {claim['key_id']}" + (
            f" ({claim['name']})" if claim.get("name") else "")
    else:
        who = f"public key hint {hint}" if hint else "no key hint"
    return UntrustedSignerError(
        f"{directory}: signed by a key that is not trusted ({who})",
        hint="if you trust this signer, get their public key and run "
             "`hub trust add KEY.pub.pem --name NAME`")


def _keys_for(candidates: list[TrustedKey], hint: str | None) -> list[tuple[TrustedKey, Any]]:
    """The candidates (with loaded keys) that may have signed. Upstream's key hint is the
    SHA-256 of the PEM public key; without one (model-signing < 1.0), all are tried."""
    loaded = [(c, keys.load_public_key(c.public_key.encode(), source=c.label))
              for c in candidates]
    if not hint:
        return loaded
    return [(c, k) for c, k in loaded if hashlib.sha256(keys.public_pem(k)).hexdigest() == hint]


def _signed_files(statement, path: Path) -> dict[str, str]:
    """File name -> signed hex SHA-256, from a verified statement.

    Raises:
        InvalidSignatureError: the statement is not a per-file SHA-256 one.
    """
    method, hash_type = (statement.serialization_type.get(k) for k in ("method", "hash_type"))
    if (method, hash_type) != ("files", "sha256"):
        raise InvalidSignatureError(
            f"{path}: signed with {method}/{hash_type} serialization; only files/sha256 "
            "is supported",
            hint="sign with `hub sign`, or `model_signing sign key` with default options")
    return {rd.identifier: rd.digest.digest_hex for rd in statement.resource_descriptors()}


def _signed_digests(signature, candidates: list[TrustedKey],
                    directory: Path) -> tuple[TrustedKey, dict[str, str]]:
    """The key that made `signature` and the file digests it signed.

    Raises:
        UntrustedSignerError: no candidate key made it.
        InvalidSignatureError: not a key signature; the key named by its hint does not verify
            it; or the statement is not a per-file SHA-256 one.
    """
    from hubcli.signing import upstream

    path = directory / SIGNATURE
    material = signature.bundle.verification_material.public_key
    if material is None:
        raise InvalidSignatureError(f"{path}: not signed with a key (certificate and "
                                    "Sigstore signatures are not supported)")
    for candidate, key in _keys_for(candidates, material.hint):
        try:
            # upstream prints a warning to stdout for hint-less signatures; keep stdout clean
            with contextlib.redirect_stdout(sys.stderr):
                statement = upstream.verify_statement(signature, key)
        except upstream.VERIFY_ERRORS as e:
            if not material.hint:
                continue
            detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            raise InvalidSignatureError(f"{path}: the signature does not verify with key "
                                        f"{candidate.key_id} ({detail})",
                                        hint=TAMPERED_HINT) from None
        return candidate, _signed_files(statement, path)
    raise _untrusted(directory, material.hint)


def compare_digests(directory: Path, signed: dict[str, str], actual: dict[str, str]) -> None:
    """The files present are exactly the signed ones, byte for byte.

    Raises:
        TamperedError: a renamed, missing, added, edited (manifest) or modified file.
    """
    missing = sorted(set(signed) - set(actual))
    extra = sorted(set(actual) - set(signed))
    for name in missing:
        renamed = [e for e in extra if actual[e] == signed[name]]
        if renamed:
            raise TamperedError(f"{directory}: {name} was renamed to {renamed[0]} after signing",
                                file=name, hint=TAMPERED_HINT)
    if missing:
        raise TamperedError(f"{directory}: {missing[0]} is missing (it was signed)",
                            file=missing[0], hint=TAMPERED_HINT)
    if extra:
        raise TamperedError(f"{directory}: {extra[0]} is not covered by the signature "
                            "(added after signing?)", file=extra[0], hint=TAMPERED_HINT)
    for name in sorted(signed):
        if signed[name] == actual[name]:
            continue
        if name == MANIFEST:
            raise TamperedError(f"{directory}: {MANIFEST} was edited after signing",
                                file=name, hint=TAMPERED_HINT)
        raise TamperedError(f"{directory}: {name} was modified after signing (sha256 "
                            f"{actual[name]}, signed {signed[name]})", file=name,
                            hint=TAMPERED_HINT)


def verify_digests(directory: Path, candidates: Iterable[TrustedKey],
                   digests: dict[str, str]) -> TrustedKey:
    """Verify `model.sig` against `candidates` and the already computed file `digests`
    (every file but the signature). Returns the candidate that signed. The manifest's signer
    claim is the caller's to check, with the parsed manifest (`check_signer_claim`).

    Raises:
        NoSignatureError, UntrustedSignerError, InvalidSignatureError, TamperedError.
    """
    directory = Path(directory)
    path = directory / SIGNATURE
    if not path.is_file():
        raise NoSignatureError(f"{directory}: not signed (no {SIGNATURE})",
                               hint="sign it with `hub sign DIR` (create a key once with "
                                    "`hub keygen`)")
    key, signed = _signed_digests(_read_signature(path), list(candidates), directory)
    compare_digests(directory, signed, digests)
    return key


def check_signer_claim(directory: Path, claim: dict[str, Any], key: TrustedKey) -> None:
    """The signer the manifest names (its "signer" object, `claim`) is the key that signed.
    Run with the parsed manifest: `verify_digests` proved it is the signed one, so the file is
    not read again for this.

    Raises:
        InvalidSignatureError: the manifest names another key.
    """
    claimed = claim.get("key_id")
    if claimed and claimed != key.key_id:
        raise InvalidSignatureError(f"{directory}: {MANIFEST} names signer {claimed}, but the "
                                    f"signature was made by {key.key_id}",
                                    hint="re-sign with the key the manifest names")


def verify_signature(directory: Path, public_keys: list[bytes]) -> str:
    """Verify the bundle's signature against PEM `public_keys`; return the signer's key id.

    Raises:
        BundleError: a symlink, sub-folder or special file in the folder.
        SigningKeyError: one of `public_keys` is not a supported PEM public key.
        NoSignatureError, UntrustedSignerError, InvalidSignatureError, TamperedError.
    """
    directory = Path(directory)
    digests = hash_files(directory, list_files(directory))
    key = verify_digests(directory, trust.unnamed(public_keys), digests)
    check_signer_claim(directory, _claimed_signer(directory), key)
    return key.key_id


def verify_bundle(directory: Path, *, extra_public_keys: Iterable[bytes] = ()) -> VerifyResult:
    """`hub verify`: the signature is from a trusted key (trust store, plus `extra_public_keys`),
    the files are exactly the signed ones, and the bundle is well formed.

    Raises:
        NoSignatureError, UntrustedSignerError, InvalidSignatureError, TamperedError,
        BundleError, ManifestError: each with a message saying what is wrong.
    """
    directory = Path(directory)
    sizes = list_files(directory)
    digests = hash_files(directory, sizes)
    key = verify_digests(directory, trust.accepted_keys(extra_public_keys), digests)
    check_names(directory, sizes)
    manifest = check_contents(directory, sizes, digests)
    check_signer_claim(directory, manifest.get("signer", {}), key)
    return VerifyResult(directory, key.key_id, signer_name(key, manifest), manifest)


def signer_name(key: TrustedKey, manifest: dict[str, Any]) -> str | None:
    """The trust store's name for the key, else the name the (verified) manifest gives."""
    return key.name or manifest.get("signer", {}).get("name")
