"""Attaching a saved adapter to a frozen base: verify first, then load weights.

Order matters: signature and file digests are checked (`verify_adapter`, once, into a
`VerifiedBundle`), then the base's content hash is compared with the manifest's, and only then
is any weight read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hubcli.errors import BaseMismatchError

if TYPE_CHECKING:
    from hubcli.signing.policy import VerifiedBundle


def check_base(manifest: dict, base_info, *, allow_base_mismatch: bool,
               notify: Callable[[str], None]) -> None:
    """Refuse (or, when allowed, warn about) a base whose content hash differs.

    Raises:
        BaseMismatchError: hashes differ and the mismatch is not allowed.
    """
    expected = manifest["base_model"]["content_hash"]
    if expected == base_info.content_hash:
        return
    err = BaseMismatchError(expected=expected, actual=base_info.content_hash,
                            expected_name=manifest["base_model"]["name"])
    if not allow_base_mismatch:
        raise err
    notify(f"warning: {err} (attaching anyway: --allow-base-mismatch)")


def verify_adapter(directory: Path, *, allow_unsigned: bool = False,
                   notify: Callable[[str], None] = lambda _m: None) -> VerifiedBundle:
    """The one verify step before attaching: signature (trust store, plus the registry key a
    pull recorded for this folder), digests, manifest and weights header, each file hashed
    once. Prints the verdict's line through `notify`.

    Raises:
        SignatureError, BundleError, ManifestError: see `check_attach`.
    """
    from hubcli.remote.pull_records import registry_keys_for
    from hubcli.signing.policy import check_attach

    bundle = check_attach(Path(directory), allow_unsigned=allow_unsigned,
                          extra_public_keys=registry_keys_for(Path(directory)))
    notify(bundle.message)
    return bundle


def attach(model, base_info, bundle: VerifiedBundle, *, name: str | None = None,
           allow_base_mismatch: bool = False,
           notify: Callable[[str], None] = lambda _m: None) -> dict:
    """Add the verified adapter `bundle` to `model` (an AdapterModel) as `name` (default: the
    manifest's name). Returns the manifest.

    Raises:
        BaseMismatchError: the base differs and that is not allowed; before any weight loads.
        AdapterError: the weights file cannot be read.
    """
    from hubcli.local.adapterdir import read_adapter_weights
    from hubcli.core.config import config_from_manifest
    from hubcli.core.heads import HeadConfig

    manifest = bundle.manifest
    check_base(manifest, base_info, allow_base_mismatch=allow_base_mismatch, notify=notify)
    name = name or manifest["name"]
    model.add_adapter(name, config_from_manifest(manifest["architecture"]),
                      HeadConfig.from_manifest(manifest["head"]))
    try:
        model.load_adapter_state(name, read_adapter_weights(bundle.directory))
    except Exception:
        model.remove_adapter(name)
        raise
    return manifest


def base_for(manifest: dict, override: str | None) -> str | None:
    """Which base to load for an adapter: the user's choice, else a local copy with the
    manifest's content hash (the packaged default included), else the manifest's recorded
    name."""
    if override:
        return override
    from hubcli.base.ref import find_base

    return find_base(manifest["base_model"]["content_hash"]) or manifest["base_model"]["name"]


def attach_to_fresh_base(bundle: VerifiedBundle, *, base: str | None = None,
                         allow_base_mismatch: bool = False,
                         notify: Callable[[str], None] = lambda _m: None):
    """Load the right base and attach + activate the verified adapter `bundle`.

    Returns (AdapterModel, LoadedBase).

    Raises:
        ModelError: the base cannot be loaded.
        BaseMismatchError, AdapterError: see `attach`.
    """
    from hubcli.base.load import load_base
    from hubcli.core.model import AdapterModel

    manifest = bundle.manifest
    loaded = load_base(base_for(manifest, base), revision=manifest["base_model"].get("revision"))
    model = AdapterModel(loaded.encoder)
    attach(model, loaded.info, bundle, allow_base_mismatch=allow_base_mismatch, notify=notify)
    model.activate(manifest["name"])
    model.eval()
    return model, loaded
