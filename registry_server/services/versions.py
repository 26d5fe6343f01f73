"""What happens to a version after it is pushed: yank, un-yank, delete."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry_server.errors import BadRequest, RevisionNotFound
from registry_server.models import Adapter, User, Version, utcnow
from registry_server.services import dependencies
from registry_server.services.repos import refresh_latest, require_writer

MAX_REASON = 500


def get_version(session: Session, adapter: Adapter, version: str) -> Version:
    """A version of `adapter` by number (yanked ones included, deleted ones not).

    Raises:
        RevisionNotFound: no such version, or it was deleted.
    """
    found = session.scalar(select(Version).where(Version.adapter_id == adapter.id,
                                                 Version.version == version))
    if found is None or found.deleted:
        gone = " (it was deleted)" if found is not None else ""
        raise RevisionNotFound(f"{adapter.repo_id} has no version {version}{gone}",
                               repo_id=adapter.repo_id, revision=version)
    return found


def yank(session: Session, adapter: Adapter, user: User, version: str, reason: str) -> Version:
    """Yank a version: `main` and searches skip it; exact pins still download it, with a warning.

    Raises:
        Forbidden: `user` may not manage this adapter. RevisionNotFound: no such version.
        BadRequest: an empty or over-long reason.
    """
    require_writer(session, adapter.namespace, user)
    reason = " ".join(reason.split())
    if not reason or len(reason) > MAX_REASON:
        raise BadRequest(f"a yank reason must have 1 to {MAX_REASON} characters",
                         hint="say why users should avoid this version")
    found = get_version(session, adapter, version)
    lock(session, adapter)
    found.yanked_at, found.yank_reason = utcnow(), reason
    refresh_latest(session, adapter)
    session.commit()
    return found


def unyank(session: Session, adapter: Adapter, user: User, version: str) -> Version:
    """Raises: Forbidden, RevisionNotFound: as for `yank`."""
    require_writer(session, adapter.namespace, user)
    found = get_version(session, adapter, version)
    lock(session, adapter)
    found.yanked_at, found.yank_reason = None, None
    refresh_latest(session, adapter)
    session.commit()
    return found


def delete(session: Session, adapter: Adapter, user: User, version: str) -> Version:
    """Delete a version: it can no longer be downloaded, and its number is never reused.

    Its blobs stay until `hub-registry gc` finds them unused.

    Raises:
        Forbidden, RevisionNotFound: as for `yank`.
        Conflict: live versions require it (named); yanking is allowed instead.
    """
    require_writer(session, adapter.namespace, user)
    found = get_version(session, adapter, version)
    lock(session, adapter)
    mark_deleted(session, found)
    refresh_latest(session, adapter)
    session.commit()
    return found


def mark_deleted(session: Session, version: Version) -> None:
    """Mark one version deleted, inside the caller's transaction (which holds the adapter's
    lock and refreshes `main`): the one step both a version's and a repository's deletion
    take, so what may not be deleted is decided here for both.

    Raises:
        Conflict (409): live versions of other adapters require it.
    """
    dependencies.refuse_if_required(session, version)
    version.deleted_at = utcnow()


def lock(session: Session, adapter: Adapter) -> None:
    """Take the adapter's row lock, the same a commit takes, so `main` is recomputed from a
    settled set of versions."""
    session.execute(select(Adapter.id).where(Adapter.id == adapter.id).with_for_update())
