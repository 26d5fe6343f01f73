"""Committing a new version: the registry's push policy, applied atomically.

1. Build the new file tree: the parent version's files, minus deletions, plus the staged
   uploads and LFS objects this adapter received.
2. Check limits, then materialise the tree in a private temp folder and run the bundle checks
   (`check_bundle`) and signature verification against the pusher's registered public keys.
3. Store the new blobs (content-addressed, atomic writes).
4. In one database transaction: refuse a version number that exists with other content
   (`Conflict`) or was deleted, do nothing for identical content, else insert the version and
   its files and move `main`. The (adapter, version) unique constraint settles races.

Nothing is visible before step 4 commits; a failure at any step leaves at most unreferenced
blobs, which `hub-registry gc` removes.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hubcli.bundle import README
from hubcli.format.bundle_rules import SIGNATURE, check_contents, check_names
from hubcli.errors import (BundleError, HubError, ManifestError, SignatureError,
                           UntrustedSignerError)
from hubcli.fsutil import git_blob_oid
from hubcli.format.safejson import NUL, nul_field
from hubcli.signing import trust
from hubcli.signing.verify import check_signer_claim, verify_digests
from registry_server import semver
from registry_server.db import insert_ignore
from registry_server.errors import (BadRequest, Conflict, PayloadTooLarge, Rejected,
                                    SignatureRejected)
from registry_server.models import (ADAPTER, BASE, Adapter, Blob, LfsUpload, User, Version,
                                    VersionFile, utcnow)
from registry_server.services import bases, dependencies
from registry_server.services.accounts import list_public_keys
from registry_server.services.repos import refresh_latest, require_writer, resolve_revision
from registry_server.storage import BlobStorage

CARD_CHARS = 100_000
VERSION_LEN = 64  # the lengths of their database columns
BASE_NAME_LEN = 256


@dataclass(frozen=True)
class Limits:
    max_file_size: int
    max_bundle_size: int
    max_files: int


@dataclass(frozen=True)
class StagedFile:
    """A file uploaded inline, already written to a local temp file and hashed."""

    path: str
    source: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class LfsRef:
    """A file uploaded earlier through the LFS batch API, referenced by its SHA-256."""

    path: str
    oid: str
    size: int


@dataclass
class CommitRequest:
    summary: str = ""
    parent_commit: str | None = None
    staged: list[StagedFile] = field(default_factory=list)
    lfs: list[LfsRef] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)
    deleted_folders: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CommitResult:
    version: Version
    created: bool  # False: the same content was pushed before under this version


@dataclass(frozen=True)
class _Entry:
    sha256: str
    size: int
    source: Path | None = None  # a staged file, or None when the blob is stored already
    git_oid: str | None = None  # known for blobs a version holds already


def commit(session: Session, storage: BlobStorage, adapter: Adapter, user: User,
           request: CommitRequest, *, limits: Limits, workdir: Path) -> CommitResult:
    """Apply `request` to `adapter` as `user`; `workdir` is an empty private temp folder.

    Raises:
        Forbidden: `user` may not push here. RevisionNotFound: unknown parent commit.
        BadRequest: an LFS object that was not uploaded to this adapter.
        PayloadTooLarge: a limit is exceeded.
        Rejected: not a valid bundle (names, manifest, digests, weights header), the
            manifest names another adapter, or requires one this registry does not have
            (by reference, exact version and manifest digest).
        SignatureRejected: not signed by a key registered to `user`.
        Conflict: the version exists with other content, or was deleted.
    """
    require_writer(session, adapter.namespace, user)
    tree = _build_tree(session, adapter, request)
    _check_limits(tree, limits)
    bundle = workdir / "bundle"
    bundle.mkdir()
    _materialise(storage, tree, bundle)
    digest = tree_digest(tree)
    required: list[Version] = []  # what a composed adapter's manifest requires
    if bases.is_base_push(session, adapter, set(tree)):
        existing = bases.same_content(session, adapter, digest)
        fields = None if existing else _base_fields(session, adapter, bundle, tree)
    else:
        fields = _adapter_fields(*_check_policy(session, adapter, user, bundle, tree))
        required = dependencies.resolve(session, fields.manifest)
        existing = _existing(session, adapter, fields.version, digest)
    if existing is not None:
        return CommitResult(existing, created=False)
    # Every SHA-256 is known already (computed on upload); only new blobs need a git SHA-1.
    hashes = {path: (e.sha256, e.git_oid or git_blob_oid(bundle / path), e.size)
              for path, e in tree.items()}
    for path, entry in tree.items():
        if entry.source is not None:
            storage.put(entry.sha256, bundle / path)
    card = _read_card(bundle)
    return _record(session, adapter, user, request.summary, fields, digest, card, tree, hashes,
                   required)


@dataclass(frozen=True)
class _Fields:
    """What a new version's row records besides its files."""

    kind: str
    version: str
    manifest: dict
    task: str
    head_type: str
    base_model_name: str
    base_model_hash: str
    tokenizer_hash: str | None
    signer_key_id: str


def _adapter_fields(manifest: dict, signer: str) -> _Fields:
    base = manifest["base_model"]
    return _Fields(ADAPTER, manifest["version"], manifest, manifest["task"],
                   manifest["head"]["type"], base["name"], base["content_hash"],
                   base.get("tokenizer_hash"), signer)


def _base_fields(session: Session, adapter: Adapter, bundle: Path,
                 tree: dict[str, _Entry]) -> _Fields:
    """Raises: Rejected: not a base model folder (see `bases.describe`)."""
    record = bases.describe(adapter, bundle, set(tree))
    return _Fields(BASE, bases.next_version(session, adapter), record, "", "", adapter.repo_id,
                   record["content_hash"], record["tokenizer_hash"], "")


def _build_tree(session: Session, adapter: Adapter, request: CommitRequest) -> dict[str, _Entry]:
    tree: dict[str, _Entry] = {}
    if request.parent_commit or adapter.latest is not None:
        parent = resolve_revision(session, adapter, request.parent_commit or "main").version
        tree = {f.path: _Entry(f.blob_sha256, f.blob.size, git_oid=f.blob.git_oid)
                for f in parent.files}
    for path in request.deleted_files:
        tree.pop(path, None)
    for folder in request.deleted_folders:
        prefix = folder.strip("/") + "/"
        tree = {p: e for p, e in tree.items() if not (p.startswith(prefix) or folder in ("", "/"))}
    for staged in request.staged:
        tree[staged.path] = _Entry(staged.sha256, staged.size, staged.source)
    allowed = referencable_objects(session, adapter, [ref.oid for ref in request.lfs])
    for ref in request.lfs:
        if allowed.get(ref.oid) != ref.size:
            raise BadRequest(f"{ref.path}: LFS object {ref.oid} ({ref.size} bytes) was not "
                             f"uploaded to {adapter.repo_id}",
                             hint="upload it through the LFS batch API first")
        tree[ref.path] = _Entry(ref.oid, ref.size)
    return tree


def referencable_objects(session: Session, adapter: Adapter,
                         oids: list[str]) -> dict[str, int]:
    """oid -> size of the objects this adapter may reference: uploaded to it, or in its versions.

    Any other stored blob is off limits: naming a hash must not grant access to its content.
    """
    if not oids:
        return {}
    uploaded = session.execute(select(LfsUpload.oid, LfsUpload.size).where(
        LfsUpload.adapter_id == adapter.id, LfsUpload.oid.in_(oids)))
    committed = session.execute(
        select(Blob.sha256, Blob.size).join(VersionFile, VersionFile.blob_sha256 == Blob.sha256)
        .join(Version, Version.id == VersionFile.version_id)
        .where(Version.adapter_id == adapter.id, Blob.sha256.in_(oids)))
    return {oid: size for oid, size in [*uploaded, *committed]}


def _check_limits(tree: dict[str, _Entry], limits: Limits) -> None:
    if len(tree) > limits.max_files:
        raise PayloadTooLarge(f"the commit would hold {len(tree)} files; at most "
                              f"{limits.max_files} are allowed")
    for path, entry in tree.items():
        if entry.size > limits.max_file_size:
            raise PayloadTooLarge(f"{path} has {entry.size} bytes; at most "
                                  f"{limits.max_file_size} are allowed per file")
    total = sum(e.size for e in tree.values())
    if total > limits.max_bundle_size:
        raise PayloadTooLarge(f"the bundle would hold {total} bytes; at most "
                              f"{limits.max_bundle_size} are allowed")


def _materialise(storage: BlobStorage, tree: dict[str, _Entry], bundle: Path) -> None:
    for path, entry in tree.items():
        if entry.source is not None:
            os.replace(entry.source, bundle / path)
        else:
            storage.copy_to(entry.sha256, bundle / path)


def _check_policy(session: Session, adapter: Adapter, user: User, bundle: Path,
                  tree: dict[str, _Entry]) -> tuple[dict, str]:
    """The bundle's manifest and signer key id, checked with the digests the tree knows (no
    file is hashed again).

    Raises:
        Rejected: not a valid bundle, or it names another adapter.
        SignatureRejected: not signed by a key registered to `user`.
    """
    keys = [k.pem.encode() for k in list_public_keys(session, user)]
    try:
        sizes = {path: entry.size for path, entry in tree.items()}
        check_names(bundle, sizes, require_signature=True)
        digests = {path: entry.sha256 for path, entry in tree.items() if path != SIGNATURE}
        manifest = check_contents(bundle, sizes, digests)
        key = verify_digests(bundle, trust.unnamed(keys), digests)
        check_signer_claim(bundle, manifest.get("signer", {}), key)
        signer = key.key_id
    except (BundleError, ManifestError) as e:
        raise Rejected(_pusher_view(e, bundle), hint=e.hint) from None
    except UntrustedSignerError as e:
        message = _pusher_view(e, bundle).replace("not trusted", f"not registered to {user.name}")
        raise SignatureRejected(message, hint=f"register the signing public key for {user.name} "
                                "with this registry (POST /api/v1/keys), then push "
                                "again") from None
    except SignatureError as e:
        raise SignatureRejected(_pusher_view(e, bundle), hint=e.hint) from None
    _check_storable(manifest, bundle)
    if "+" in manifest["version"]:
        # Versions differing only in build metadata would rank equal (semver.org §10).
        raise Rejected(f"manifest.json field 'version' {manifest['version']!r} has build "
                       "metadata, which this registry does not accept",
                       hint="drop the '+...' part; bump the patch or pre-release instead")
    if not semver.is_version(manifest["version"]):
        raise Rejected(f"manifest.json version {manifest['version']!r} is not a semantic version",
                       hint="use MAJOR.MINOR.PATCH, e.g. 1.0.0")
    if manifest["name"] != adapter.name:
        raise Rejected(f"manifest.json names adapter {manifest['name']!r}, but this is "
                       f"{adapter.repo_id}",
                       hint=f"push it to {adapter.namespace.name}/{manifest['name']}")
    return manifest, signer


def _check_storable(manifest: dict, bundle: Path) -> None:
    """What the schema allows but a database column cannot hold, refused alike on every
    database: NUL characters (PostgreSQL text) and values longer than their column.

    Raises:
        Rejected: names the field.
    """
    bad = nul_field(manifest, "")
    if bad is not None:
        raise Rejected(f"manifest.json field {bad!r} contains a NUL character")
    for name, value, most in (("version", manifest["version"], VERSION_LEN),
                              ("base_model.name", manifest["base_model"]["name"], BASE_NAME_LEN)):
        if len(value) > most:
            raise Rejected(f"manifest.json field {name!r} has {len(value)} characters; at most "
                           f"{most} are allowed")


def _pusher_view(error: HubError, bundle: Path) -> str:
    """The error message naming files as the pusher knows them, not by our temp paths."""
    return str(error).replace(f"{bundle}/", "").replace(str(bundle), "the bundle")


def tree_digest(tree: dict[str, _Entry]) -> str:
    h = hashlib.sha256()
    for path in sorted(tree):
        h.update(f"{path}\0{tree[path].sha256}\n".encode())
    return h.hexdigest()


def commit_sha(repo_id: str, version: str, digest: str) -> str:
    """A 40-hex commit id: a function of repo, version and content, so a replay is identical."""
    return hashlib.sha1(f"{repo_id}\n{version}\n{digest}".encode()).hexdigest()


def _existing(session: Session, adapter: Adapter, version: str, digest: str) -> Version | None:
    """The same version with the same content, else None.

    Raises:
        Conflict: the version exists with other content, or was deleted.
    """
    found = session.scalar(select(Version).where(Version.adapter_id == adapter.id,
                                                 Version.version == version))
    if found is None:
        return None
    if found.deleted:
        raise Conflict(f"version {version} of {adapter.repo_id} was deleted; version numbers "
                       "are never reused", repo_id=adapter.repo_id, revision=version,
                       hint="bump the version in manifest.json and push again")
    if found.tree_digest != digest:
        raise Conflict(f"version {version} of {adapter.repo_id} exists with other content; "
                       "versions are immutable", repo_id=adapter.repo_id, revision=version,
                       hint="bump the version in manifest.json, then bundle, sign and push "
                            "again")
    return found


def _read_card(bundle: Path) -> str:
    """The model card's first CARD_CHARS characters (read no further).

    Raises:
        Rejected: it holds a NUL character, which no text column stores alike everywhere.
    """
    try:
        with open(bundle / README, "rb") as f:
            raw = f.read(4 * CARD_CHARS)  # UTF-8: at most 4 bytes a character
    except FileNotFoundError:
        return ""
    card = raw.decode("utf-8", errors="replace")[:CARD_CHARS]
    if NUL in card:
        raise Rejected(f"{README} contains a NUL character", hint="a model card is text")
    return card


def _record(session: Session, adapter: Adapter, user: User, summary: str, fields: _Fields,
            digest: str, card: str, tree: dict[str, _Entry],
            hashes: dict[str, tuple[str, str, int]], required: list[Version]) -> CommitResult:
    """Insert the version in one transaction, holding the adapter's row lock."""
    name = fields.version
    try:
        # Serialises commits to one adapter on PostgreSQL; SQLite serialises all writers.
        session.execute(select(Adapter.id).where(Adapter.id == adapter.id).with_for_update())
        existing = _existing(session, adapter, name, digest)
        if existing is not None:
            session.rollback()
            return CommitResult(existing, created=False)
        _insert_blobs(session, hashes.values())
        version = Version(
            adapter_id=adapter.id, version=name, commit_sha=commit_sha(adapter.repo_id, name, digest),
            tree_digest=digest, summary=summary[:10_000], card=card, manifest=fields.manifest,
            task=fields.task, head_type=fields.head_type, base_model_name=fields.base_model_name,
            base_model_hash=fields.base_model_hash, tokenizer_hash=fields.tokenizer_hash,
            signer_key_id=fields.signer_key_id, pushed_by_id=user.id,
            files=[VersionFile(path=p, blob_sha256=e.sha256) for p, e in sorted(tree.items())])
        session.add(version)
        session.add_all(dependencies.record(version, required))
        session.flush()
        adapter.kind, adapter.updated_at = fields.kind, utcnow()
        refresh_latest(session, adapter)
        session.commit()
    except IntegrityError:
        # A concurrent push of the same version won the unique constraint.
        session.rollback()
        existing = _existing(session, adapter, name, digest)
        if existing is None:
            raise
        return CommitResult(existing, created=False)
    except BaseException:
        session.rollback()
        raise
    return CommitResult(version, created=True)


def _insert_blobs(session: Session, hashes) -> None:
    # Another push may be adding the same blob right now: skip rows that exist.
    unique = {sha: (git, size) for sha, git, size in hashes}  # two paths may share content
    insert_ignore(session, Blob, [{"sha256": s, "git_oid": g, "size": n, "created_at": utcnow()}
                                  for s, (g, n) in unique.items()])
