"""Attaching a saved adapter to a frozen base: verify first, then load weights.

Order matters: signature and file digests are checked, then the base's content hash is
compared with the manifest's, and only then is any weight read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from hubcli.format import manifest as manifest_io
from hubcli.errors import BaseMismatchError


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


def verify_folder(directory: Path, *, allow_unsigned: bool,
                  notify: Callable[[str], None]) -> dict:
    """Check the adapter folder's signature and file digests (the attach policy); returns
    its manifest.

    Raises:
        SignatureError, BundleError, ManifestError.
    """
    from hubcli.remote.pull_records import registry_keys_for
    from hubcli.signing.policy import check_attach

    verdict = check_attach(directory, allow_unsigned=allow_unsigned,
                           extra_public_keys=registry_keys_for(directory))
    if verdict.message:
        notify(verdict.message)
    return manifest_io.read(directory)


def attach(model, base_info, directory: Path, *, name: str | None = None,
           allow_base_mismatch: bool = False, allow_unsigned: bool = False,
           notify: Callable[[str], None] = lambda _m: None) -> dict:
    """Verify the adapter in `directory` and add it to `model` (an AdapterModel) as `name`.

    Returns the manifest. Raises SignatureError, BundleError, ManifestError,
    BaseMismatchError or AdapterError, before any weight is loaded where possible.
    """
    from hubcli.local.adapterdir import read_adapter_weights
    from hubcli.core.config import config_from_manifest
    from hubcli.core.heads import HeadConfig

    manifest = verify_folder(Path(directory), allow_unsigned=allow_unsigned, notify=notify)
    check_base(manifest, base_info, allow_base_mismatch=allow_base_mismatch, notify=notify)
    name = name or manifest["name"]
    model.add_adapter(name, config_from_manifest(manifest["architecture"]),
                      HeadConfig.from_manifest(manifest["head"]))
    try:
        model.load_adapter_state(name, read_adapter_weights(Path(directory)))
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
    from hubcli.base.ref import locate_base

    return locate_base(manifest["base_model"]["content_hash"]) or manifest["base_model"]["name"]


def attach_to_fresh_base(directory: Path, *, base: str | None = None, **kwargs):
    """Load the right base and attach + activate the adapter in `directory`.

    Returns (AdapterModel, LoadedBase, manifest).
    """
    from hubcli.base.load import load_base
    from hubcli.core.model import AdapterModel

    manifest = manifest_io.read(Path(directory))
    loaded = load_base(base_for(manifest, base), revision=manifest["base_model"].get("revision"))
    model = AdapterModel(loaded.encoder)
    manifest = attach(model, loaded.info, directory, **kwargs)
    model.activate(manifest["name"])
    model.eval()
    return model, loaded, manifest
