"""Adapters (repositories): creation, visibility, revisions and files.

A revision is `main` (the newest version that is neither yanked nor deleted), a version tag
(`1.2.0`, also written `v1.2.0`) or a 40-hex commit id. Tags and commit ids are exact pins: they
reach yanked versions too (the caller adds a warning); deleted versions are gone for good.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, and_, bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry_server import semver
from registry_server.errors import (Conflict, EntryNotFound, Forbidden, RepoNotFound,
                                    RevisionNotFound)
from registry_server.models import (Adapter, AdapterTag, Blob, Namespace, RepoRedirect, User,
                                    Version, VersionFile)
from registry_server.services.accounts import check_name, get_namespace, member_namespace_ids

MAIN = "main"
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
SEARCH_CARD_CHARS = 20_000


@dataclass(frozen=True)
class Resolved:
    """A revision resolved to a version; `pinned` when it named the version exactly."""

    version: Version
    pinned: bool


@dataclass(frozen=True)
class FileRef:
    """A file of a version, as a download needs it (no ORM objects: this is the hot path)."""

    repo_id: str
    adapter_id: int
    private: bool
    version_id: int
    version: str
    commit_sha: str
    pinned: bool
    warning: str | None  # set when an exact pin reaches a yanked version
    path: str
    sha256: str
    size: int


def find_adapter(session: Session, namespace: str, name: str) -> Adapter | None:
    """The repository `namespace/name`, or the one moved away from that name; None if there is
    none or it was deleted."""
    adapter = session.scalar(select(Adapter).join(Adapter.namespace)
                             .where(Namespace.name == namespace, Adapter.name == name))
    if adapter is None:
        adapter = session.scalar(select(Adapter).join(
            RepoRedirect, RepoRedirect.adapter_id == Adapter.id).where(
            RepoRedirect.namespace == namespace, RepoRedirect.name == name))
    return None if adapter is None or adapter.deleted_at is not None else adapter


def can_read(session: Session, adapter: Adapter, viewer: User | None) -> bool:
    return not adapter.private or adapter.namespace_id in member_namespace_ids(session, viewer)


def can_write(session: Session, namespace: Namespace, user: User) -> bool:
    return namespace.id in member_namespace_ids(session, user)


def get_adapter(session: Session, namespace: str, name: str, viewer: User | None) -> Adapter:
    """The adapter `namespace/name` if `viewer` may read it.

    Raises:
        RepoNotFound: it does not exist or is private to others (the same answer, so private
            names do not leak); status 401 for anonymous callers, who may need to log in.
    """
    adapter = find_adapter(session, namespace, name)
    if adapter is None or not can_read(session, adapter, viewer):
        raise RepoNotFound(f"repository {namespace}/{name} not found",
                           repo_id=f"{namespace}/{name}", status=401 if viewer is None else 404,
                           hint=None if viewer else "if it is private, log in with a token")
    return adapter


def require_writer(session: Session, namespace: Namespace, user: User) -> None:
    """Raises: Forbidden: `user` is neither the namespace's user nor a member of its org."""
    if not can_write(session, namespace, user):
        raise Forbidden(f"{user.name} may not push to {namespace.name}",
                        hint=f"ask an owner of {namespace.name} to add you as a member")


def create_adapter(session: Session, user: User, namespace: str, name: str, *,
                   private: bool = False) -> Adapter:
    """Create an empty adapter repository.

    Raises:
        NotFound: no such namespace. Forbidden: `user` may not create adapters there.
        BadRequest: bad name. Conflict: it exists already.
    """
    ns = get_namespace(session, namespace)
    require_writer(session, ns, user)
    check_name(name, "adapter name")
    check_name_free(session, ns, name)
    adapter = Adapter(namespace=ns, name=name, private=private)
    session.add(adapter)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise Conflict(f"repository {namespace}/{name} exists already",
                       repo_id=f"{namespace}/{name}") from None
    return adapter


def check_name_free(session: Session, ns: Namespace, name: str) -> None:
    """Raises: Conflict: a repository has (or had: deleted, or moved away) this name; names
    are compared regardless of case, since `alice/Up` beside `alice/up` would pass for it."""
    existing = session.scalar(select(Adapter).where(
        Adapter.namespace_id == ns.id, func.lower(Adapter.name) == name.lower()))
    repo_id = f"{ns.name}/{name}"
    if existing is not None and existing.deleted_at is not None:
        raise Conflict(f"repository {ns.name}/{existing.name} was deleted; its name is never "
                       "reused, so pins of its versions cannot reach other content",
                       repo_id=repo_id, hint="choose another name")
    if existing is not None:
        raise Conflict(f"repository {ns.name}/{existing.name} exists already"
                       + ("" if existing.name == name else " (names may not differ only in case)"),
                       repo_id=repo_id)
    moved = session.scalar(select(RepoRedirect).where(
        func.lower(RepoRedirect.namespace) == ns.name.lower(),
        func.lower(RepoRedirect.name) == name.lower()))
    if moved is not None:
        target = session.get(Adapter, moved.adapter_id)
        raise Conflict(f"repository {moved.namespace}/{moved.name} was moved to "
                       f"{target.repo_id}; its old name keeps pointing there",
                       repo_id=repo_id, hint="choose another name")


def set_private(session: Session, adapter: Adapter, user: User, private: bool) -> None:
    """Raises: Forbidden: `user` is not a member of the adapter's namespace."""
    require_writer(session, adapter.namespace, user)
    adapter.private = private
    session.commit()


def live_versions(session: Session, adapter: Adapter) -> list[Version]:
    """Versions that are not deleted, newest (by semantic version) first."""
    versions = session.scalars(select(Version).where(Version.adapter_id == adapter.id,
                                                     Version.deleted_at.is_(None)))
    return sorted(versions, key=lambda v: semver.sort_key(v.version), reverse=True)


def pick_latest(versions: list[Version]) -> Version | None:
    """The newest version neither yanked nor deleted; pre-releases only if there is no release."""
    candidates = [v for v in versions if not v.yanked and not v.deleted]
    releases = [v for v in candidates if not semver.is_prerelease(v.version)]
    pool = releases or candidates
    return max(pool, key=lambda v: semver.sort_key(v.version)) if pool else None


def refresh_latest(session: Session, adapter: Adapter) -> None:
    """Point `main` at the newest version and copy its search fields onto the adapter.

    Call inside the transaction that changed the versions; does not commit.
    """
    latest = pick_latest(live_versions(session, adapter))
    adapter.latest = latest
    if latest is None:
        adapter.task = adapter.head_type = adapter.base_model_name = None
        adapter.base_model_hash = None
        adapter.description, adapter.search_text, adapter.tags = "", adapter.name.lower(), []
        return
    manifest = latest.manifest
    tags = sorted({str(t)[:64] for t in manifest.get("tags", [])})
    adapter.description = manifest.get("description", "")
    adapter.task, adapter.head_type = latest.task, latest.head_type
    adapter.base_model_name, adapter.base_model_hash = latest.base_model_name, latest.base_model_hash
    adapter.tags = [AdapterTag(tag=t) for t in tags]
    adapter.search_text = "\n".join([adapter.name, adapter.description, " ".join(tags),
                                     latest.card[:SEARCH_CARD_CHARS]]).lower()


def _pinned(revision: str) -> ColumnElement[bool]:
    """The condition on Version for a version number (`1.2.0` or `v1.2.0`) or commit id."""
    if COMMIT_SHA.fullmatch(revision):
        return Version.commit_sha == revision
    return Version.version == _version_name(revision)


def _version_name(revision: str) -> str:
    return revision[1:] if revision[:1] == "v" and semver.is_version(revision[1:]) else revision


def resolve_revision(session: Session, adapter: Adapter, revision: str) -> Resolved:
    """The version a revision names.

    Raises:
        RevisionNotFound: no such version or commit, or it was deleted; for `main`, no version
            that is not yanked.
    """
    if revision == MAIN:
        if adapter.latest is None:
            raise RevisionNotFound(f"{adapter.repo_id} has no version yet on {MAIN} (none pushed, "
                                   "or all yanked)", repo_id=adapter.repo_id, revision=revision,
                                   hint="pin an exact version to get a yanked one")
        return Resolved(adapter.latest, pinned=False)
    version = session.scalar(select(Version).where(Version.adapter_id == adapter.id,
                                                   _pinned(revision)))
    if version is None or version.deleted:
        gone = " (it was deleted)" if version is not None else ""
        raise RevisionNotFound(f"{adapter.repo_id} has no revision {revision!r}{gone}",
                               repo_id=adapter.repo_id, revision=revision,
                               hint=f"use {MAIN}, a version number or a commit id")
    return Resolved(version, pinned=True)


def _locate_statement(pinned: bool, by_commit: bool) -> Select:
    """The one-query file lookup, built once per kind (building a statement costs more than
    running it)."""
    if not pinned:
        on_version = Version.id == Adapter.latest_version_id
    else:
        column = Version.commit_sha if by_commit else Version.version
        on_version = and_(Version.adapter_id == Adapter.id, column == bindparam("revision"))
    return (select(Adapter.id, Adapter.private, Adapter.namespace_id,
                   Version.id.label("version_id"), Version.version, Version.commit_sha,
                   Version.yank_reason, Version.yanked_at, Version.deleted_at, Blob.sha256,
                   Blob.size)
            .select_from(Adapter).join(Namespace, Namespace.id == Adapter.namespace_id)
            .join(Version, on_version)
            .join(VersionFile, and_(VersionFile.version_id == Version.id,
                                    VersionFile.path == bindparam("path")))
            .join(Blob, Blob.sha256 == VersionFile.blob_sha256)
            .where(Namespace.name == bindparam("namespace"), Adapter.name == bindparam("name")))


_LOCATE = {(pinned, by_commit): _locate_statement(pinned, by_commit)
           for pinned in (False, True) for by_commit in (False, True)}


def locate_file(session: Session, namespace: str, name: str, revision: str, path: str,
                viewer: User | None) -> FileRef:
    """The file `path` of `namespace/name` at `revision`, if `viewer` may read it.

    One query when everything exists (the download hot path); otherwise the step-by-step
    lookup names what is missing.

    Raises:
        RepoNotFound, RevisionNotFound, EntryNotFound: as `get_adapter`, `resolve_revision`
            and `get_file`.
    """
    pinned, by_commit = revision != MAIN, bool(COMMIT_SHA.fullmatch(revision))
    # Plain rows through the Connection: the ORM's result machinery is not needed here.
    row = session.connection().execute(_LOCATE[pinned, by_commit], {
        "namespace": namespace, "name": name, "path": path,
        "revision": _version_name(revision)}).one_or_none()
    readable = row is not None and (not row.private or row.namespace_id
                                    in member_namespace_ids(session, viewer))
    if not readable or row.deleted_at is not None:
        return _locate_step_by_step(session, namespace, name, revision, path, viewer)
    warning = (_yank_message(f"{namespace}/{name}", row.version, row.yank_reason)
               if row.yanked_at is not None else None)
    return FileRef(f"{namespace}/{name}", row.id, row.private, row.version_id, row.version,
                   row.commit_sha, pinned, warning, path, row.sha256, row.size)


def _locate_step_by_step(session: Session, namespace: str, name: str, revision: str, path: str,
                         viewer: User | None) -> FileRef:
    adapter = get_adapter(session, namespace, name, viewer)
    resolved = resolve_revision(session, adapter, revision)
    version, f = resolved.version, get_file(resolved.version, path)
    return FileRef(adapter.repo_id, adapter.id, adapter.private, version.id, version.version,
                   version.commit_sha, resolved.pinned, yank_warning(version), path,
                   f.blob_sha256, f.blob.size)


def get_file(version: Version, path: str) -> VersionFile:
    """Raises: EntryNotFound: the version has no such file (with X-Repo-Commit, so clients can
    cache the absence)."""
    for f in version.files:
        if f.path == path:
            return f
    raise EntryNotFound(f"{version.adapter.repo_id}@{version.version} has no file {path!r}",
                        repo_id=version.adapter.repo_id, revision=version.commit_sha,
                        headers={"X-Repo-Commit": version.commit_sha})


def yank_warning(version: Version) -> str | None:
    """The warning a download of a yanked version carries, else None."""
    if not version.yanked:
        return None
    return _yank_message(version.adapter.repo_id, version.version, version.yank_reason)


def _yank_message(repo_id: str, version: str, reason: str | None) -> str:
    return f"{repo_id} version {version} is yanked" + (f": {reason}" if reason else "")
