"""The pieces of model-signing (the OpenSSF reference implementation) that we use, in one place.

Import this module lazily: model-signing pulls in sigstore and takes about a second to import.
It is pinned (model-signing==1.1.1) because two of its non-public parts are used here: the key
signer's steps, so the signature can be written atomically, and the key verifier, so it can be
built from an in-memory key.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from model_signing import hashing, manifest

from hubcli.format import safejson
from model_signing._signing import sign_ec_key, sign_sigstore_pb, signing

# What a bad signature raises: cryptography's InvalidSignature, or the errors model-signing's
# unguarded parsing of the envelope and statement lets through (missing keys or signatures).
# RecursionError: a deeply nested statement, signed by its pusher's own key, is malformed too.
VERIFY_ERRORS = (InvalidSignature, ValueError, KeyError, TypeError, IndexError, AttributeError,
                 RecursionError)
READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError)


class KeyVerifier(sign_ec_key.Verifier):
    """Upstream's elliptic-curve key verifier, from a loaded key instead of a file."""

    def __init__(self, public_key: ec.EllipticCurvePublicKey) -> None:
        self._public_key = public_key


def sign_directory(directory: Path, private_key_path: Path, passphrase: str | None,
                   ignore: str) -> str:
    """The Sigstore bundle JSON signing every file in `directory` but `ignore` (and git
    metadata, as `model_signing sign key` does), with the key at `private_key_path`."""
    hashed = hashing.Config().set_ignored_paths(paths=[ignore]).hash(directory)
    secret = passphrase.encode("utf-8") if passphrase else None
    signature = sign_ec_key.Signer(private_key_path, secret).sign(signing.Payload(hashed))
    return signature.bundle.to_json()


def read_signature(path: Path) -> sign_sigstore_pb.Signature:
    """Parse a signature file (no verification). Raises READ_ERRORS when malformed (nested
    too deeply included: checked first, since the upstream parser recurses)."""
    safejson.loads(path.read_bytes())
    return sign_sigstore_pb.Signature.read(path)


def verify_statement(signature: sign_sigstore_pb.Signature,
                     public_key: ec.EllipticCurvePublicKey) -> manifest.Manifest:
    """Check the DSSE signature with `public_key`; return the signed manifest.
    Raises VERIFY_ERRORS when it does not verify."""
    return KeyVerifier(public_key).verify(signature)
