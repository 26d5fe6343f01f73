"""Composed adapters: an AdapterFusion, or an adapter stacked on others (MAD-X), whose
manifest's `requires` pins each component by name, exact version and manifest SHA-256.

Resolving a composed adapter finds every component (its folder as recorded, else the pull
cache, else the registry, pulled and verified like any pull), verifies it like the adapter
itself (signature, digests, weights header), refuses one whose manifest digest differs, naming
it (unless only bundling and signing it since made it differ), and refuses components trained
on another base: all before the base or any weight loads.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hubcli.errors import BaseMismatchError, ComponentError, HubError
from hubcli.format import manifest as manifest_io
from hubcli.format.bundle_rules import README
from hubcli.format.manifest import MANIFEST

if TYPE_CHECKING:
    from hubcli.signing.policy import VerifiedBundle

Verify = Callable[[Path], "VerifiedBundle"]

# per thread (a server verifies on several): the folders whose components are being resolved
_resolving = threading.local()


def pin(bundle: VerifiedBundle, *, ref: str | None = None,
        path: str | None = None) -> dict[str, Any]:
    """The `requires` entry for a verified component: its name, version and manifest digest,
    and where to find it (a registry reference NS/NAME and/or a folder)."""
    where = {k: v for k, v in (("ref", ref), ("path", path)) if v}
    return {"name": bundle.manifest["name"], "version": bundle.manifest["version"],
            "manifest_sha256": bundle.digests[MANIFEST], **where}


def label(requirement: dict[str, Any]) -> str:
    """How a component is named to people: 'alice/sst2-adapter@0.1.0' or 'sst2-adapter@0.1.0'."""
    return f"{requirement.get('ref', requirement['name'])}@{requirement['version']}"


def resolve_components(bundle: VerifiedBundle, verify: Verify,
                       notify: Callable[[str], None]) -> VerifiedBundle:
    """`bundle` with its components found, verified (by `verify`, which resolves theirs in
    turn) and checked against their pins and its base.

    Raises:
        ComponentError: a component not found, whose manifest digest differs (named), or
            that is `bundle` itself or requires it (a loop).
        BaseMismatchError: a component trained on another base (named).
        SignatureError, BundleError, ManifestError, RegistryError: from verifying or pulling.
    """
    requires = bundle.manifest.get("requires", ())
    if not requires:
        return bundle
    here = Path(bundle.directory).resolve()
    chain = getattr(_resolving, "chain", ())  # the composed adapters resolving, outermost first
    if here in chain:
        raise ComponentError(f"its folder {here} is an adapter it is composed of, or composed "
                             "of it: a loop", component=bundle.manifest["name"],
                             hint="a composed adapter was written over one of its components; "
                                  "train it again with --out a folder of its own")
    _resolving.chain = (*chain, here)
    try:
        components = tuple(_find(r, Path(bundle.directory), verify, notify) for r in requires)
    finally:
        _resolving.chain = chain
    base = bundle.manifest["base_model"]
    for requirement, component in zip(requires, components):
        theirs = component.manifest["base_model"]["content_hash"]
        if theirs != base["content_hash"]:
            raise BaseMismatchError(expected=base["content_hash"], actual=theirs,
                                    expected_name=base["name"], component=label(requirement))
    return replace(bundle, components=components)


def _find(requirement: dict[str, Any], parent: Path, verify: Verify,
          notify: Callable[[str], None]) -> VerifiedBundle:
    """The verified folder of one component: its recorded folder when it holds the pinned
    manifest, else the pull cache or the registry by its reference.

    Raises:
        ComponentError: nowhere to be found, or the pinned digest differs.
    """
    name = label(requirement)
    if "path" in requirement:
        folder = (parent / requirement["path"]).resolve()
        if folder.is_dir():
            found = verify(folder)
            if _matches(found, requirement) or "ref" not in requirement:
                return _checked(found, requirement)
            notify(f"notice: {folder} is not the {name} this adapter was composed with; "
                   f"looking for {requirement['ref']} instead")
    if "ref" not in requirement:
        where = (parent / requirement["path"]).resolve()
        raise ComponentError(f"its folder {where} is missing", component=name,
                             hint="put the adapter there again, or re-create this one with "
                                  "registry references (`hub fuse --adapters NS/NAME@VERSION`, "
                                  "`hub train --stack NS/NAME@VERSION`)")
    from hubcli.remote.pull import ensure_pulled

    try:
        folder = ensure_pulled(f"{requirement['ref']}@{requirement['version']}", notify=notify)
    except HubError as e:
        raise ComponentError(f"cannot be fetched: {e}", component=name, hint=e.hint) from None
    return _checked(verify(folder), requirement)


def _matches(found: VerifiedBundle, requirement: dict[str, Any]) -> bool:
    """The pinned manifest, or the same before `hub bundle` and `hub sign` touched it."""
    pinned = requirement["manifest_sha256"]
    return found.digests[MANIFEST] == pinned or pinned in before_packaging(found.manifest)


def before_packaging(manifest: dict[str, Any]) -> set[str]:
    """The SHA-256 digests `manifest`, written as hub writes it, had before it was signed
    (`hub sign` records its `signer`) and, signed or not, before it was bundled (`hub bundle`
    lists its model card in `files`), each also before an ablation was recorded in it (`hub
    ablate --record` adds its `analysis`): none of them changes a tensor, so a component
    bundled, signed or ablated after the adapter composed over it was trained (the README's
    order) is still the one it was trained with. Its files' digests are checked against the
    new manifest when it is verified. (An ablation recorded over one it already held when
    pinned is not undone here: the pin does not say what the earlier one was.)"""
    unsigned = {k: v for k, v in manifest.items() if k != "signer"}
    uncarded = {**unsigned, "files": [f for f in unsigned.get("files", ())
                                      if f.get("path") != README]}
    forms = [unsigned, uncarded]
    forms += [{k: v for k, v in m.items() if k != "analysis"} for m in forms]
    return {hashlib.sha256(manifest_io.dumps(m).encode()).hexdigest() for m in forms}


def _checked(found: VerifiedBundle, requirement: dict[str, Any]) -> VerifiedBundle:
    """Raises: ComponentError: the manifest digest is not the pinned one."""
    if _matches(found, requirement):
        return found
    m = found.manifest
    raise ComponentError(
        f"{found.directory} holds {m['name']} {m['version']} with manifest sha256 "
        f"{found.digests[MANIFEST]}, but the adapter requiring it was composed with "
        f"{requirement['manifest_sha256']}", component=label(requirement),
        hint="it is not the exact adapter the fusion or stack was trained with (bundling, "
             "signing or recording an ablation in it since is fine, unless it held one "
             "already then; anything else changed is not): get that one back "
             "(`hub pull NS/NAME@VERSION`), or train the composed adapter again")

