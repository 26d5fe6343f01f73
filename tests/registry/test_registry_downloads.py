"""Download counts buffered in memory and written in the background."""

from __future__ import annotations

import time

from conftest import HEADER, bundle_ops, post_commit, signed_bundle
from sqlalchemy import select

from registry_server.db import db
from registry_server.models import Adapter, Version
from registry_server.services.downloads import DownloadCounter


def _counts(registry) -> tuple[int, int]:
    with registry.session() as session:
        return (session.scalar(select(Version.downloads)),
                session.scalar(select(Adapter.downloads)))


def test_counts_are_written_in_the_background_and_on_flush(registry, signing_key, tmp_path):
    token = registry.user("alice", key=signing_key)
    registry.app.test_client().post("/api/repos/create", json={"name": "sst2"},
                                    headers={"Authorization": f"Bearer {token}"})
    post_commit(registry, token, [HEADER, *bundle_ops(signed_bundle(tmp_path / "b",
                                                                    signing_key))])
    with registry.session() as session:
        version_id, adapter_id = session.execute(select(Version.id, Version.adapter_id)).one()

    counter = DownloadCounter(db.factory(registry.app), interval=0.2)
    for _ in range(3):
        counter.add(version_id, adapter_id)
    assert _counts(registry) == (0, 0)
    deadline = time.monotonic() + 5
    while _counts(registry) != (3, 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _counts(registry) == (3, 3)

    slow = DownloadCounter(db.factory(registry.app), interval=3600)
    slow.add(version_id, adapter_id)
    slow.flush()
    assert _counts(registry) == (4, 4)

    closing = DownloadCounter(db.factory(registry.app), interval=3600)
    closing.add(version_id, adapter_id)
    closing.close()  # an app stopped before its process ends writes what it counted
    assert _counts(registry) == (5, 5)
