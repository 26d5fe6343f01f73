"""A repository as a whole: delete it, move it (rename, or transfer to another namespace).

Neither ever lets another repository take over a name that pins point at: a deleted
repository keeps its row (`deleted_at`), and a moved one leaves a redirect, so
`old/name@1.0.0` still reaches the same bytes (or nothing), never someone else's.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.orm import Session

from registry_server.errors import BadRequest
from registry_server.models import Adapter, RepoRedirect, User, utcnow
from registry_server.services import versions
from registry_server.services.accounts import check_name, get_namespace
from registry_server.services.repos import check_name_free, live_versions, refresh_latest, \
    require_writer


def delete_repo(session: Session, adapter: Adapter, user: User) -> None:
    """Delete the repository and every version of it, in one transaction: all or none.

    Its blobs stay until `hub-registry gc` finds them unused.

    Raises:
        Forbidden: `user` may not manage this repository. Conflict: a version may not be
            deleted (`versions.mark_deleted` decides, as for a single version).
    """
    require_writer(session, adapter.namespace, user)
    try:
        versions.lock(session, adapter)
        for version in live_versions(session, adapter):
            versions.mark_deleted(session, version)
        refresh_latest(session, adapter)
        adapter.deleted_at = adapter.updated_at = utcnow()
        session.commit()
    except BaseException:
        session.rollback()
        raise


def move_repo(session: Session, adapter: Adapter, user: User, to_namespace: str,
              to_name: str) -> Adapter:
    """Rename the repository or move it to another namespace; the old name redirects to it.

    Raises:
        Forbidden: `user` may not write to the old or the new namespace. NotFound: no such
            namespace. BadRequest: a bad name, or the same name. Conflict: the new name is
            taken (or was: deleted, or moved away).
    """
    require_writer(session, adapter.namespace, user)
    target = get_namespace(session, to_namespace)
    require_writer(session, target, user)
    check_name(to_name, "adapter name")
    if (target.id, to_name) == (adapter.namespace_id, adapter.name):
        raise BadRequest(f"{adapter.repo_id} has that name already")
    old_namespace, old_name = adapter.namespace.name, adapter.name
    # A redirect the repository left here before is dropped: it holds the name itself again.
    session.execute(delete(RepoRedirect).where(RepoRedirect.adapter_id == adapter.id,
                                               RepoRedirect.namespace == target.name,
                                               RepoRedirect.name == to_name))
    session.flush()
    if (target.id, to_name.lower()) != (adapter.namespace_id, adapter.name.lower()):
        check_name_free(session, target, to_name)
    try:
        session.add(RepoRedirect(namespace=old_namespace, name=old_name, adapter_id=adapter.id))
        adapter.namespace, adapter.name, adapter.updated_at = target, to_name, utcnow()
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return adapter
