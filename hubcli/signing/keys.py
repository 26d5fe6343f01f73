"""Signing keys: one ECDSA P-256 key pair in `$HUB_HOME/keys/`, the private half readable by
the owner only and optionally encrypted with a passphrase.

A key is named by its key id: "sha256:" + hex SHA-256 of its DER SubjectPublicKeyInfo.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hubcli.errors import SigningKeyError
from hubcli.fsutil import atomic_write_bytes
from hubcli.settings import KEYS_DIR, home_path

PRIVATE_KEY = "signing_key.pem"
PUBLIC_KEY = "signing_key.pub.pem"
# The curves model-signing accepts; we generate P-256 but verify any of them.
SUPPORTED_CURVES = ("secp256r1", "secp384r1", "secp521r1")


@dataclass(frozen=True)
class KeyPair:
    private_path: Path
    public_path: Path
    key_id: str


def keys_dir() -> Path:
    return home_path(KEYS_DIR)


def private_key_path() -> Path:
    return keys_dir() / PRIVATE_KEY


def public_key_path() -> Path:
    return keys_dir() / PUBLIC_KEY


def public_pem(key: ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey) -> bytes:
    """The PEM SubjectPublicKeyInfo of a key (the public half of a private key)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        key = key.public_key()
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(pem: bytes, *, source: str = "public key") -> ec.EllipticCurvePublicKey:
    """Parse a PEM public key and check it is an elliptic-curve key model-signing supports.

    Raises:
        SigningKeyError: not a PEM public key, or not a supported EC key; names `source`.
    """
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError:
        raise SigningKeyError(f"{source}: not a PEM public key",
                              hint="pass the .pub.pem file written by `hub keygen`") from None
    return _check_curve(key, source)


def _check_curve(key, source: str):
    public = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise SigningKeyError(f"{source}: not an elliptic-curve key",
                              hint="create an ECDSA P-256 key with `hub keygen`")
    if public.curve.name not in SUPPORTED_CURVES:
        raise SigningKeyError(f"{source}: curve {public.curve.name} is not supported",
                              hint=f"use one of {', '.join(SUPPORTED_CURVES)}")
    return key


def key_id(public_key_pem: bytes) -> str:
    """"sha256:" + hex SHA-256 of the key's DER SubjectPublicKeyInfo.

    Raises:
        SigningKeyError: not a supported PEM public key.
    """
    der = load_public_key(public_key_pem).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def is_encrypted(path: Path) -> bool:
    """Whether the PEM private key at `path` needs a passphrase (False if it is missing)."""
    try:
        with open(path, "rb") as f:
            return b"ENCRYPTED" in f.readline()
    except FileNotFoundError:
        return False


def load_private_key(path: Path | None = None,
                     passphrase: str | None = None) -> ec.EllipticCurvePrivateKey:
    """Load the signing key (default: the one `hub keygen` wrote).

    Raises:
        SigningKeyError: missing file, passphrase missing or wrong, not a supported EC key.
    """
    path = Path(path) if path else private_key_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SigningKeyError(f"no signing key at {path}",
                              hint="create one with `hub keygen`") from None
    secret = passphrase.encode("utf-8") if passphrase else None
    try:
        key = serialization.load_pem_private_key(data, secret)
    except TypeError:
        # cryptography says "not given but encrypted" or "given but not encrypted" this way.
        if secret is None:
            raise SigningKeyError(f"{path}: the key is encrypted and no passphrase was given",
                                  hint="set HUB_KEY_PASSPHRASE or enter it when asked") from None
        raise SigningKeyError(f"{path}: a passphrase was given but the key is not encrypted",
                              hint="unset HUB_KEY_PASSPHRASE") from None
    except ValueError:
        if secret is not None and b"ENCRYPTED" in data:
            raise SigningKeyError(f"{path}: wrong passphrase",
                                  hint="check HUB_KEY_PASSPHRASE") from None
        raise SigningKeyError(f"{path}: not a PEM private key",
                              hint="create one with `hub keygen`") from None
    return _check_curve(key, str(path))


def generate_keypair(*, passphrase: str | None = None, force: bool = False) -> KeyPair:
    """Create an ECDSA P-256 key pair in `keys_dir()`: the private key with mode 0600 (encrypted
    when `passphrase` is given), the public key beside it.

    Raises:
        SigningKeyError: a key exists already and `force` is false.
    """
    private_path, public_path = private_key_path(), public_key_path()
    if private_path.exists() and not force:
        raise SigningKeyError(f"a signing key exists already at {private_path}",
                              hint="pass --force to replace it (bundles signed with it then "
                                   "verify only where its public key is still trusted)")
    keys_dir().mkdir(parents=True, exist_ok=True)
    keys_dir().chmod(0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    encryption = (serialization.BestAvailableEncryption(passphrase.encode("utf-8"))
                  if passphrase else serialization.NoEncryption())
    atomic_write_bytes(private_path, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption), mode=0o600)
    pem = public_pem(key)
    atomic_write_bytes(public_path, pem, mode=0o644)
    return KeyPair(private_path, public_path, key_id(pem))


def sign_challenge(private_key: ec.EllipticCurvePrivateKey, challenge: str) -> str:
    """Prove holding `private_key` to a registry: the base64 DER ECDSA-SHA256 signature of the
    registry's challenge text (UTF-8). Challenges start with a fixed prefix, so this signature
    can never pass for a bundle signature (those sign a DSSE envelope)."""
    signature = private_key.sign(challenge.encode("utf-8"), ec.ECDSA(hashes.SHA256()))
    return base64.b64encode(signature).decode("ascii")


def verify_challenge(public_key_pem: bytes, challenge: str, signature: str) -> bool:
    """Whether `signature` (from `sign_challenge`) signs `challenge` with this key's private
    half. A signature that is not base64 does not verify.

    Raises:
        SigningKeyError: not a supported PEM public key.
    """
    key = load_public_key(public_key_pem)
    try:
        key.verify(base64.b64decode(signature, validate=True), challenge.encode("utf-8"),
                   ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True
