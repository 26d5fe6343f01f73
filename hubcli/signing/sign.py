"""Signing a bundle in the OpenSSF model-signing format (key method): an in-toto statement over
per-file SHA-256 digests, in a DSSE envelope, in a Sigstore bundle, written to `model.sig`.
`model_signing verify key DIR --signature DIR/model.sig --public_key KEY` accepts it."""

from __future__ import annotations

from pathlib import Path

from hubcli.format import manifest as manifest_io
from hubcli.format.bundle_rules import SIGNATURE, check_bundle
from hubcli.fsutil import atomic_write_text
from hubcli.settings import load_config, save_config
from hubcli.signing import keys, trust

PASSPHRASE_ENV = "HUB_KEY_PASSPHRASE"
OWN_KEY_NAME = "self"


def create_signing_key(*, name: str | None = None, passphrase: str | None = None,
                       force: bool = False) -> keys.KeyPair:
    """`hub keygen`: create the key pair and trust its public key (as `name`, default "self"),
    so your own bundles verify; `name` is also recorded as signer name when you sign.

    Raises:
        SigningKeyError: a key exists already and `force` is false.
        UsageError: `name` is not a simple token.
    """
    pair = keys.generate_keypair(passphrase=passphrase, force=force)
    trust.add(pair.public_path.read_bytes(), name or OWN_KEY_NAME, replace_name=True)
    save_config({"signer_name": name})
    return pair


def sign_bundle(directory: Path, private_key_path: Path | None = None,
                passphrase: str | None = None) -> str:
    """Check the bundle, record the signer (key id, and the name from `hub keygen --name`) in
    its manifest, then write `model.sig` over every file. Returns the signer's key id.

    Raises:
        SigningKeyError: the key is missing, encrypted without (or with a wrong) passphrase.
        BundleError, ManifestError: the folder is not a complete bundle (run `hub bundle`).
    """
    directory = Path(directory)
    private_key_path = Path(private_key_path) if private_key_path else keys.private_key_path()
    # the folder first: `hub sign ./typo` is about the folder, whatever the state of the key
    manifest = check_bundle(directory, require_readme=True)
    kid = keys.key_id(keys.public_pem(keys.load_private_key(private_key_path, passphrase)))
    name = load_config().get("signer_name")
    signer = {"key_id": kid, **({"name": name} if name else {})}
    if manifest.get("signer") != signer:
        manifest_io.write(directory, {**manifest, "signer": signer})
    from hubcli.signing import upstream  # ~1 s import, only when signing

    atomic_write_text(directory / SIGNATURE,
                      upstream.sign_directory(directory, private_key_path, passphrase, SIGNATURE))
    return kid
