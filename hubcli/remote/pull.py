"""`hub pull NS/NAME[@VERSION]`: download into the Hugging Face cache layout under HUB_HOME,
copy into a private folder, verify there (signature from a trusted or registry key, digests,
weights header), and only then move it into place and record it. A download that fails
verification is removed from the cache too, so it is fetched afresh next time.

A composed adapter (a fusion, or an adapter stacked on others) brings its components: each
one its manifest's `requires` names is pulled from the same remote (unless pulled before),
verified the same way, and must have the pinned manifest digest.

Layout:  $HUB_HOME/hf-cache/<host>/models--NS--NAME/...    (huggingface_hub's cache)
         $HUB_HOME/adapters/<host>/NS/NAME/VERSION/          (verified bundles)
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from hubcli.format import manifest as manifest_io
from hubcli.remote import pull_records as pulled
from hubcli.errors import ComponentError, HubError, NotFoundError, RegistryError, UsageError
from hubcli.format.manifest import MANIFEST
from hubcli.format.vocab import ADAPTER_REF as REF
from hubcli.fsutil import sha256_file, staged_dir
from hubcli.remote.client import (MAIN, REGISTRY, Remote, download_snapshot, namespace_keys,
                                  purge_snapshot, version_info)
from hubcli.settings import ADAPTERS_DIR, HF_CACHE_DIR, home_path, save_config

COMMIT = re.compile(r"^[0-9a-f]{40}$")
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
LAST_PULLED = "last_pulled"  # config key read by hubcli.remote.refs


@dataclass(frozen=True)
class PullResult:
    record: pulled.PullRecord
    signer: str  # who signed it, for people: 'alice (sha256:...)'
    base: str  # where the base will come from, for people
    warnings: tuple[str, ...] = ()
    components: tuple[pulled.PullRecord, ...] = ()  # what it requires, pulled or found


def parse_ref(ref: str) -> tuple[str, str | None]:
    """'ns/name@1.0.0' -> ('ns/name', '1.0.0'); no @VERSION -> version None.

    Raises:
        UsageError: not NAMESPACE/NAME[@VERSION].
    """
    m = REF.match(ref)
    if not m:
        raise UsageError(f"{ref!r} is not an adapter reference",
                         hint="use NAMESPACE/NAME or NAMESPACE/NAME@VERSION, e.g. "
                              "alice/sst2-adapter@1.0.0")
    return m["repo"], m["version"]


def pull(ref: str, remote: Remote, *, allow_unsigned: bool = False,
         notify: Callable[[str], None] = lambda _m: None) -> PullResult:
    """Download, verify and record `ref` from `remote`; it becomes the last pulled adapter.
    When its base is not on this machine and the registry hosts it (found by content hash),
    the base is downloaded and checked too. With `allow_unsigned`, a bundle that is unsigned or signed by an unknown key is kept (the
    Hugging Face Hub does not require signatures); files that changed after signing never are.

    Raises:
        UsageError: a malformed reference.
        NotFoundError, AuthError, RegistryError: the remote refused or cannot be reached.
        SignatureError, BundleError, ManifestError: the download does not verify (and was
            removed from the cache).
        ModelError: the registry's copy of the base does not hash as the manifest says.
        ComponentError: a component it requires cannot be pulled, or is not the pinned one.
    """
    repo_id, wanted = parse_ref(ref)
    keys = _registry_keys(remote, repo_id.split("/")[0])
    notify(f"downloading {repo_id}@{wanted or MAIN} from {remote.endpoint}")
    snapshot = download_snapshot(remote, repo_id, wanted or MAIN,
                                 home_path(HF_CACHE_DIR) / remote.cache_key)
    try:
        manifest = manifest_io.read(snapshot)
        _check_version(repo_id, wanted, manifest["version"])
        final = home_path(ADAPTERS_DIR) / remote.cache_key / repo_id / manifest["version"]
        verdict = _verify_into(snapshot, final, keys, allow_unsigned,
                               label=f"{repo_id}@{manifest['version']}")
    except HubError:
        purge_snapshot(snapshot)
        raise
    key_pem = next((k.decode("ascii") for k in keys if _key_id(k) == verdict.key_id), None)
    record = pulled.PullRecord(repo_id, manifest["version"], snapshot.name, remote.endpoint,
                               str(final.resolve()), verdict.key_id, key_pem,
                               datetime.now(timezone.utc).isoformat(timespec="seconds"))
    pulled.add(record)
    save_config({LAST_PULLED: record.ref})
    _fetch_missing_base(remote, manifest["base_model"], notify)
    # `main` never resolves to a yanked version; only an exact one can be yanked
    warnings = _yank_warning(remote, record) if wanted is not None else []
    components = [_pull_component(r, remote, allow_unsigned, notify)
                  for r in manifest.get("requires", ())]
    if components:
        save_config({LAST_PULLED: record.ref})  # the composed adapter, not its last component
    return PullResult(record, _signer(verdict), describe_base(manifest),
                      tuple(warnings + [w for _, ws in components for w in ws]),
                      tuple(c for c, _ in components))


def _pull_component(requirement: dict, remote: Remote, allow_unsigned: bool,
                    notify: Callable[[str], None]) -> tuple[pulled.PullRecord, list[str]]:
    """(the pull record, warnings) of a component a composed adapter requires: pulled before,
    else pulled now from `remote`; either way with the pinned manifest digest.

    Raises:
        ComponentError: no registry reference, cannot be pulled, or another manifest digest.
    """
    name = f"{requirement.get('ref', requirement['name'])}@{requirement['version']}"
    if "ref" not in requirement:
        raise ComponentError("it is required by a local folder only and cannot be pulled",
                             component=name, hint="ask the publisher to compose it from "
                                                  "registry references")
    found, warnings = pulled.find(requirement["ref"], requirement["version"]), []
    if found is None or sha256_file(Path(found.path) / MANIFEST) != requirement["manifest_sha256"]:
        try:
            result = pull(f"{requirement['ref']}@{requirement['version']}", remote,
                          allow_unsigned=allow_unsigned, notify=notify)
        except HubError as e:
            raise ComponentError(f"cannot be pulled: {e}", component=name, hint=e.hint) from None
        found, warnings = result.record, list(result.warnings)
    digest = sha256_file(Path(found.path) / MANIFEST)
    if digest != requirement["manifest_sha256"]:
        raise ComponentError(f"{remote.endpoint} serves it with manifest sha256 {digest}, but "
                             f"the adapter requiring it was composed with "
                             f"{requirement['manifest_sha256']}", component=name,
                             hint="the registry's copy is not the one it was trained with")
    return found, warnings


def _fetch_missing_base(remote: Remote, base: dict, notify: Callable[[str], None]) -> None:
    """Download the adapter's base from the registry, found by its content hash, when this
    machine has no copy, and remember it where `find_base` looks.

    Raises:
        ModelError: the registry's base does not hash as the manifest says (not kept).
    """
    from hubcli.base.ref import find_base, remember_base
    from hubcli.remote.bases import fetch_base

    if find_base(base["content_hash"]) is not None:
        return
    fetched = fetch_base(remote, base["content_hash"], base.get("tokenizer_hash"), notify)
    if fetched is not None:
        remember_base(base["content_hash"], fetched[0], str(fetched[1]))


def _check_version(repo_id: str, wanted: str | None, got: str) -> None:
    """Raises: RegistryError: the remote served another version than the one asked for."""
    if wanted is None or COMMIT.match(wanted) or got in (wanted, wanted.removeprefix("v")):
        return
    raise RegistryError(f"asked for {repo_id}@{wanted}, but its manifest.json says version "
                        f"{got}", repo_id=repo_id, revision=wanted,
                        hint="the registry or the repository is inconsistent; tell its owner")


def _verify_into(snapshot: Path, final: Path, keys: list[bytes], allow_unsigned: bool, *,
                 label: str):
    """Copy the snapshot's files (following the cache's links) into a staged folder, verify
    it, then swap it in as `final`. Returns the attach verdict.

    Raises: SignatureError, BundleError, ManifestError, naming `label` instead of the stage.
    """
    from hubcli.signing.policy import check_attach

    with staged_dir(final) as stage:
        for entry in snapshot.iterdir():
            shutil.copyfile(entry, stage / entry.name)  # follows the link to the blob
        try:
            verdict = check_attach(stage, allow_unsigned=allow_unsigned,
                                   extra_public_keys=keys)
        except HubError as e:
            e.args = (str(e).replace(str(stage), f"{label} (downloaded)"),)
            raise
    return verdict


def _signer(verdict) -> str:
    from hubcli.signing.trust import signer_label

    if verdict.status == "trusted":
        return signer_label(verdict.signer_name, verdict.key_id)
    if verdict.status == "self-trained":
        return "nobody you trust, but you made it on this machine"
    return "nobody you trust: NOT verified (--allow-unsigned)"


def _key_id(pem: bytes) -> str:
    from hubcli.signing.keys import key_id

    return key_id(pem)


def _registry_keys(remote: Remote, namespace: str) -> list[bytes]:
    """The keys our registry accepts pushes to `namespace` with; the Hub has none, and a
    registry too old to list them (404) leaves the trust store to decide."""
    if remote.kind != REGISTRY:
        return []
    try:
        return namespace_keys(remote, namespace)
    except NotFoundError:
        return []


def _yank_warning(remote: Remote, record: pulled.PullRecord) -> list[str]:
    if remote.kind != REGISTRY:
        return []
    info = version_info(remote, record.repo_id, record.version)
    if not info.get("yanked"):
        return []
    reason = f": {info['yank_reason']}" if info.get("yank_reason") else ""
    return [f"warning: {record.ref} is yanked{reason}"]


def describe_base(manifest: dict) -> str:
    """Where the adapter's base will come from: found locally, or fetched when first used."""
    from hubcli.base.ref import find_base

    base = manifest["base_model"]
    path = find_base(base["content_hash"])
    if path:
        return f"base {base['name']} is on this machine ({path})"
    missing = f"base {base['name']} ({base['content_hash'][:19]}…) is not on this machine"
    if HUB_ID.match(base["name"]):
        revision = f" at revision {base['revision']}" if base.get("revision") else ""
        return (f"{missing}; it will be downloaded from the Hugging Face Hub{revision} when "
                "first used")
    return f"{missing}; pass --base FOLDER (a copy of it) when you use the adapter"


def ensure_pulled(ref: str, notify: Callable[[str], None]) -> Path:
    """The verified local folder of `ref`: a previous pull when there is one (NS/NAME without a
    version: the latest pulled), with no network; else pulled now from the default registry.

    Raises: see `pull`.
    """
    repo_id, version = parse_ref(ref)
    found = pulled.find(repo_id, version)
    if found is not None:
        if version is None:
            notify(f"using {found.ref}, pulled before (`hub pull {repo_id}` for a newer one)")
        return Path(found.path)
    import sys

    from hubcli.remote.credentials import registry_remote

    result = pull(ref, registry_remote(progress=sys.stderr.isatty()), notify=notify)
    notify(f"pulled {result.record.ref} into {result.record.path}")
    return Path(result.record.path)

