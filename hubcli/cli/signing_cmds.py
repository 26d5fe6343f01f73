"""`hub keygen`, `hub bundle`, `hub sign`, `hub verify` and `hub trust add|list|remove`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from hubcli.bundle import SIGNATURE, make_bundle
from hubcli.cli.output import echo_json, table
from hubcli.signing import keys
from hubcli.signing import trust as trust_store
from hubcli.signing.sign import PASSPHRASE_ENV, create_signing_key, sign_bundle
from hubcli.signing.verify import verify_bundle

DIRECTORY = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
JSON = click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")


def ask_passphrase(key_path: Path | None = None) -> str | None:
    """HUB_KEY_PASSPHRASE, else a prompt when the key is encrypted."""
    if os.environ.get(PASSPHRASE_ENV):
        return os.environ[PASSPHRASE_ENV]
    if keys.is_encrypted(key_path or keys.private_key_path()):
        return click.prompt("Passphrase for the signing key", hide_input=True)
    return None


@click.command("keygen")
@click.option("--name", help="your name: recorded as signer in bundles you sign, and the "
                             "trust-store name of your key (default: self)")
@click.option("--encrypt", is_flag=True,
              help=f"protect the private key with a passphrase, asked for unless "
                   f"{PASSPHRASE_ENV} is set (which always encrypts)")
@click.option("--force", is_flag=True, help="replace an existing key pair")
def keygen(name: str | None, encrypt: bool, force: bool) -> None:
    """Create your ECDSA P-256 signing key pair in the hub config folder (once)."""
    passphrase = os.environ.get(PASSPHRASE_ENV) or (
        click.prompt("New passphrase", hide_input=True, confirmation_prompt=True)
        if encrypt else None)
    pair = create_signing_key(name=name, passphrase=passphrase, force=force)
    click.echo(f"created signing key {pair.key_id}")
    click.echo(f"  private key: {pair.private_path} (owner-only"
               f"{', encrypted' if passphrase else ''})")
    click.echo(f"  public key:  {pair.public_path} (share it: others run `hub trust add` on it)")


@click.command("bundle")
@DIRECTORY
def bundle(directory: Path) -> None:
    """Check an adapter folder and seal it as a bundle: write its model card (README.md)."""
    manifest = make_bundle(directory)
    click.echo(f"bundled {directory}: {manifest['name']} {manifest['version']}, "
               f"{len(manifest['files'])} files listed in manifest.json")
    click.echo(f"next: hub sign {directory}")


@click.command("sign")
@DIRECTORY
@click.option("--key", "key_path", type=click.Path(dir_okay=False, path_type=Path),
              help="private key PEM (default: the key made by `hub keygen`)")
def sign(directory: Path, key_path: Path | None) -> None:
    """Sign a bundle with your key (OpenSSF model-signing format, written to model.sig)."""
    key_id = sign_bundle(directory, key_path, ask_passphrase(key_path))
    click.echo(f"signed {directory} with key {key_id}: wrote {directory / SIGNATURE}")


@click.command("verify")
@DIRECTORY
@JSON
def verify(directory: Path, as_json: bool) -> None:
    """Check that a bundle is intact and signed by a trusted key, and say whose; for a fusion
    or stack, also every adapter it requires (found, verified and pinned as for attaching)."""
    result = verify_bundle(directory)
    m = result.manifest
    tree = _components(directory) if m.get("requires") else []
    if as_json:
        echo_json({"ok": True, "directory": str(directory), "name": m["name"],
                   "version": m["version"], "key_id": result.key_id,
                   "signer": result.signer_name, **({"components": tree} if tree else {})})
        return
    click.echo(f"OK: {directory} ({m['name']} {m['version']}) is intact and signed by "
               f"{result.signer_label}")
    _echo_tree(tree, "  ")


def _components(directory: Path) -> list[dict]:
    """The verified component tree of a composed adapter, as JSON-ready dicts.

    Raises:
        ComponentError, BaseMismatchError, SignatureError, ...: see `verify_adapter`.
    """
    from hubcli.format.manifest import MANIFEST
    from hubcli.local.attach import verify_adapter

    def describe(bundle) -> dict:
        m = bundle.manifest
        return {"name": m["name"], "version": m["version"], "directory": str(bundle.directory),
                "manifest_sha256": bundle.digests[MANIFEST], "status": bundle.status,
                "signer": bundle.signer_name, "key_id": bundle.key_id,
                "components": [describe(c) for c in bundle.components]}

    return describe(verify_adapter(directory))["components"]


def _echo_tree(tree: list[dict], indent: str) -> None:
    for c in tree:
        who = (f"signed by {c['signer'] or c['key_id']}" if c["status"] == "trusted"
               else "trained on this machine" if c["status"] == "self-trained" else c["status"])
        click.echo(f"{indent}requires {c['name']} {c['version']}: {c['directory']}, manifest "
                   f"sha256 as pinned, {who}")
        _echo_tree(c["components"], indent + "  ")


@click.group("trust")
def trust() -> None:
    """Manage the public keys whose signatures you accept."""


@trust.command("add")
@click.argument("public_key", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="a short name for the key's owner, e.g. alice")
def trust_add(public_key: Path, name: str | None) -> None:
    """Trust the PEM public key in PUBLIC_KEY."""
    entry = trust_store.add(public_key.read_bytes(), name)
    click.echo(f"trusted {entry.label}")


@trust.command("list")
@JSON
def trust_list(as_json: bool) -> None:
    """List trusted keys."""
    entries = trust_store.load()
    if as_json:
        echo_json([{"key_id": k.key_id, "name": k.name, "added": k.added} for k in entries])
    elif not entries:
        click.echo("no trusted keys; add one with `hub trust add KEY.pub.pem --name NAME`")
    else:
        table(["name", "key id", "added"],
              [(k.name or "-", k.key_id, k.added) for k in entries], max_width=80)


@trust.command("remove")
@click.argument("ref")
def trust_remove(ref: str) -> None:
    """Stop trusting a key, given by name, key id, or key id prefix (8+ hex digits)."""
    entry = trust_store.remove(ref)
    click.echo(f"no longer trusted: {entry.label}")
