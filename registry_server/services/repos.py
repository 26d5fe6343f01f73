"""Adapters (repositories): creation, visibility, revisions and files.

A revision is `main` (the newest version that is neither yanked nor deleted), a version tag
(`1.2.0`, also written `v1.2.0`) or a 40-hex commit id. Tags and commit ids are exact pins: they
reach yanked versions too (the caller adds a warning); deleted versions are gone for good.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry_server import semver
from registry_server.errors import (Conflict, EntryNotFound, Forbidden, RepoNotFound,
                                    RevisionNotFound)
from registry_server.models import Adapter, AdapterTag, Namespace, User, Version, VersionFile
from registry_server.services.accounts import check_name, get_namespace, member_namespace_ids

MAIN = "main"
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
SEARCH_CARD_CHARS = 20_000


@dataclass(frozen=True)
class Resolved:
    """A revision resolved to a version; `pinned` when it named the version exactly."""

    version: Version
    pinned: bool


def find_adapter(session: Session, namespace: str, name: str) -> Adapter | None:
    return session.scalar(select(Adapter).join(Adapter.namespace)
                          .where(Namespace.name == namespace, Adapter.name == name))


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
    if find_adapter(session, namespace, name) is not None:
        raise Conflict(f"repository {namespace}/{name} exists already",
                       repo_id=f"{namespace}/{name}")
    adapter = Adapter(namespace=ns, name=name, private=private)
    session.add(adapter)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise Conflict(f"repository {namespace}/{name} exists already",
                       repo_id=f"{namespace}/{name}") from None
    return adapter


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
    column = Version.commit_sha if COMMIT_SHA.fullmatch(revision) else Version.version
    wanted = revision[1:] if revision[:1] == "v" and semver.is_version(revision[1:]) else revision
    version = session.scalar(select(Version).where(Version.adapter_id == adapter.id,
                                                   column == wanted))
    if version is None or version.deleted:
        gone = " (it was deleted)" if version is not None else ""
        raise RevisionNotFound(f"{adapter.repo_id} has no revision {revision!r}{gone}",
                               repo_id=adapter.repo_id, revision=revision,
                               hint=f"use {MAIN}, a version number or a commit id")
    return Resolved(version, pinned=True)


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
    reason = f": {version.yank_reason}" if version.yank_reason else ""
    return f"{version.adapter.repo_id} version {version.version} is yanked{reason}"
