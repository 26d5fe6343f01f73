"""Housekeeping: removing blobs that nothing references."""

from __future__ import annotations

import time

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from registry_server.models import Blob, LfsUpload
from registry_server.storage import BlobStorage


def collect_garbage(session: Session, storage: BlobStorage, *, grace_hours: float = 24,
                    dry_run: bool = False) -> list[str]:
    """Delete stored blobs without a database row that are older than `grace_hours`; returns
    their digests.

    Such blobs come from pushes refused after their files were stored, interrupted pushes, and
    LFS uploads never committed. The grace period spares pushes in progress (blobs are stored
    before the version's rows are written).
    """
    cutoff = time.time() - grace_hours * 3600
    known = set(session.scalars(select(Blob.sha256)))
    old = [sha for sha, stored in storage.digests() if stored < cutoff and sha not in known]
    if not dry_run:
        for sha in old:
            storage.delete(sha)
        if old:
            session.execute(delete(LfsUpload).where(LfsUpload.oid.in_(old)))
            session.commit()
    return old
