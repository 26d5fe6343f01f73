"""Attaching a saved adapter to a frozen base: verify first, then load weights.

Order matters: signature and file digests are checked (`verify_adapter`, once, into a
`VerifiedBundle`; for a composed adapter, every component too, see `compose.py`), then the
base's content hash is compared with the manifest's, and only then is any weight read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hubcli.errors import BaseMismatchError
from hubcli.format.manifest import MANIFEST, weights_file
from hubcli.format.vocab import FUSION

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
    from hubcli.local.compose import resolve_components

    return resolve_components(
        bundle, lambda d: verify_adapter(d, allow_unsigned=allow_unsigned, notify=notify), notify)


def attach(model, base_info, bundle: VerifiedBundle, *, name: str | None = None,
           allow_base_mismatch: bool = False,
           notify: Callable[[str], None] = lambda _m: None) -> dict:
    """Add the verified adapter `bundle` to `model` (an AdapterModel) as `name` (default: the
    manifest's name). Returns the manifest.

    A composed adapter's components are attached first, each under its own manifest name
    (once: one already attached from the same manifest is shared), then its own part: a
    fusion over them, or its adapter stacked on them; `model.activate(name)` then routes
    through the whole composition.

    All or nothing: where it fails, the components this call attached are removed again.

    Raises:
        BaseMismatchError: the base differs and that is not allowed; before any weight loads.
        AdapterError: the weights file cannot be read.
        ComponentNameTaken: another adapter of a component's name is attached.
        ComponentError: the components need two versions of one name.
    """
    manifest = bundle.manifest
    check_base(manifest, base_info, allow_base_mismatch=allow_base_mismatch, notify=notify)
    name = name or manifest["name"]
    model.require_free(name)  # before a component is attached
    _one_version_each(bundle)
    before = set(model.sources)
    try:
        blocks = [_attach_component(model, base_info, c, allow_base_mismatch, notify)
                  for c in bundle.components]
        _attach_own(model, bundle, name, blocks)
    except Exception:
        for attached in reversed([n for n in model.sources if n not in before]):
            model.remove_adapter(attached)  # a composed one before its components
        raise
    model.sources[name] = bundle.digests[MANIFEST]
    return manifest


def _one_version_each(bundle: VerifiedBundle, seen: dict[str, str] | None = None) -> None:
    """Raises ComponentError: `bundle`'s components, at any depth, need two versions of one
    name (a model holds one adapter per name: it can never be attached)."""
    from hubcli.errors import ComponentError

    seen = {} if seen is None else seen
    for c in bundle.components:
        name, digest = c.manifest["name"], c.digests[MANIFEST]
        if seen.setdefault(name, digest) != digest:
            raise ComponentError("is needed in two versions, and one adapter is attached per "
                                 "name", component=name,
                                 hint="compose it over components that agree on it")
        _one_version_each(c, seen)


def _attach_component(model, base_info, component: VerifiedBundle, allow_base_mismatch: bool,
                      notify: Callable[[str], None]):
    """The block a component is used as (its name, or its own composition), attached unless
    the same manifest is attached already.

    Raises:
        ComponentNameTaken: another adapter of its name is attached.
    """
    from hubcli.errors import ComponentNameTaken

    name = component.manifest["name"]
    digest = component.digests[MANIFEST]
    if name in model.sources:
        if model.sources[name] != digest:
            raise ComponentNameTaken(name, component.manifest["version"])
    else:
        attach(model, base_info, component, allow_base_mismatch=allow_base_mismatch,
               notify=notify)
    return model.compositions.get(name, name)


def _attach_own(model, bundle: VerifiedBundle, name: str, blocks: list) -> None:
    """Add the adapter's own tensors: a plain adapter, an adapter stacked on `blocks`, or a
    fusion over them; all or nothing."""
    from hubcli.core.composition import Fuse, Stack
    from hubcli.core.config import config_from_manifest
    from hubcli.core.heads import HeadConfig
    from hubcli.local.adapterdir import read_adapter_weights

    manifest = bundle.manifest
    arch, head = manifest["architecture"], HeadConfig.from_manifest(manifest["head"])
    if arch["type"] == FUSION:
        block = Fuse(*blocks)
        if block.name in model.infos:  # another fusion over them (one per target task)
            block = Fuse(*blocks, name=name)
        own = model.add_fusion(block, head, sites=fusion_sites(arch),
                               train_layernorm=arch["layernorm"] == "delta")
    else:
        own, block = name, (Stack(*blocks, name) if blocks else None)
        model.add_adapter(name, config_from_manifest(arch), head)
    try:
        model.load_adapter_state(own, read_adapter_weights(bundle.directory,
                                                           weights_file(manifest)))
        if block is not None:
            model.name_composition(name, block)
    except Exception:
        model.remove_adapter(own)
        raise


def fusion_sites(arch: dict) -> list[tuple[int, str]]:
    """Where a fusion's layers sit: every listed layer at every listed placement."""
    return [(i, p) for i in arch["layers"] for p in arch["placement"]]


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
