"""Concurrency under gunicorn with 4 worker processes: one version pushed twice at once yields
exactly one success and one 409; 20 clients pushing different adapters at once all succeed and
every stored blob's digest checks out."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import requests
from conftest import (HEADER, Registry, bundle_ops, free_port, pg_schema_url, post_commit,
                      signed_bundle, wait_until_up)
from sqlalchemy import select

from registry_server import create_app
from registry_server.db import db
from registry_server.models import Version
from registry_server.storage import DiskStorage

WORKERS = 4


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def server_database(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
    else:
        yield from pg_schema_url()


@pytest.fixture
def gunicorn(server_database, tmp_path) -> Iterator[Registry]:
    instance = tmp_path / "instance"
    settings = {"INSTANCE_PATH": str(instance), "DATABASE_URL": server_database}
    app = create_app({**settings, "AUTO_MIGRATE": True})  # `hub-registry migrate`, in-process
    port = free_port()
    env = {**os.environ, **{f"HUB_REGISTRY_{k}": v for k, v in settings.items()}}
    log = open(tmp_path / "gunicorn.log", "wb")
    # --preload: the app (and the ~1 s signature-verifier import) is built once, then forked.
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "--preload",
                             "-b", f"127.0.0.1:{port}", "--access-logfile", "-",
                             "registry_server:create_app()"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc)
        yield Registry(app, url)
    finally:
        proc.send_signal(signal.SIGINT)  # quick shutdown
        proc.wait(timeout=30)
        log.close()
        db.engine(app).dispose()


def _all_at_once(jobs) -> list:
    barrier = threading.Barrier(len(jobs))
    results: list = [None] * len(jobs)

    def run(i, job):
        barrier.wait()
        try:
            results[i] = job()
        except Exception as e:  # reported by the assertions below
            results[i] = e

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_one_version_pushed_twice_at_once_one_wins_one_gets_409(gunicorn, signing_key,
                                                                tmp_path):
    token = gunicorn.user("alice", key=signing_key)
    requests.post(f"{gunicorn.url}/api/repos/create", json={"name": "sst2"},
                  headers={"Authorization": f"Bearer {token}"})
    for round_ in range(3):
        version = f"1.0.{round_}"
        bodies = [[HEADER, *bundle_ops(signed_bundle(tmp_path / f"{version}-{i}", signing_key,
                                                     version=version, seed=10 * round_ + i))]
                  for i in range(2)]
        answers = _all_at_once([lambda b=b: post_commit(gunicorn, token, b) for b in bodies])
        assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
        conflict = next(a for a in answers if a.status_code == 409)
        assert f"version {version} of alice/sst2 exists with other content" in conflict.text
    with gunicorn.session() as session:
        assert sorted(session.scalars(select(Version.version))) == ["1.0.0", "1.0.1", "1.0.2"]


def test_twenty_clients_push_different_adapters_at_once(gunicorn, signing_key, tmp_path,
                                                        monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    token = gunicorn.user("alice", key=signing_key)
    api = huggingface_hub.HfApi(endpoint=gunicorn.url, token=token)
    bundles = [signed_bundle(tmp_path / f"a{i}", signing_key, name=f"adapter-{i}", seed=i % 5)
               for i in range(20)]

    def push(i: int):
        api.create_repo(f"alice/adapter-{i}")
        return api.upload_folder(folder_path=bundles[i], repo_id=f"alice/adapter-{i}").oid

    results = _all_at_once([lambda i=i: push(i) for i in range(20)])
    assert all(isinstance(r, str) and len(r) == 40 for r in results), results

    storage = DiskStorage(tmp_path / "instance" / "blobs")
    digests = [sha for sha, _ in storage.digests()]
    # 20 manifests, READMEs and signatures differ; 5 distinct weights files (seed i % 5).
    assert len(digests) == 20 * 3 + 5
    for sha in digests:
        assert hashlib.sha256(storage.path(sha).read_bytes()).hexdigest() == sha
    with gunicorn.session() as session:
        assert len(session.scalars(select(Version)).all()) == 20
    log = (tmp_path / "gunicorn.log").read_text()
    assert "POST /api/models/alice/adapter-0/commit/main" in log
    assert token not in log and "hubr_" not in log
