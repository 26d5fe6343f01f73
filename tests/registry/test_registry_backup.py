"""`hub-registry backup` / `restore`: a pushed catalogue survives the round trip byte for byte,
on SQLite, PostgreSQL and from one to the other; damaged, foreign and misplaced restores are
refused with one line and a hint, writing nothing."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
import requests
from click.testing import CliRunner
from conftest import (HEADER, bundle_ops, new_signing_key, pg_schema_url, post_commit,
                      signed_bundle, start_registry)
from sqlalchemy import func, select

from registry_server import migrate
from registry_server.backup import archive, create, restore
from registry_server.cli import cli
from registry_server.db import db, make_engine
from registry_server.models import Namespace, User
from registry_server.services import accounts
from registry_server.storage import make_storage


def hub_registry(config: dict, *args: str):
    env = {"HUB_REGISTRY_INSTANCE_PATH": config["INSTANCE_PATH"],
           "HUB_REGISTRY_DATABASE_URL": config["DATABASE_URL"],
           "HUB_REGISTRY_SECRET_KEY": config["SECRET_KEY"]}
    return CliRunner().invoke(cli, list(args), env=env)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request, tmp_path) -> dict:
    """An empty, migrated deployment to restore into (its own instance folder and blobs)."""
    config = {"INSTANCE_PATH": str(tmp_path / "target"), "SECRET_KEY": "test-secret",
              "DOWNLOAD_FLUSH_SECONDS": 0}
    if request.param == "sqlite":
        config["DATABASE_URL"] = f"sqlite:///{tmp_path / 'target.db'}"
        schema = None
    else:
        schema = pg_schema_url()
        config["DATABASE_URL"] = next(schema)
    assert hub_registry(config, "migrate").exit_code == 0
    yield config
    if schema is not None:
        next(schema, None)


def publish(registry, token: str, folder, repo: str, *, private: bool = False) -> None:
    ns, name = repo.split("/")
    requests.post(f"{registry.url}/api/repos/create", json={"name": name, "organization": ns,
                                                            "private": private},
                  headers={"Authorization": f"Bearer {token}"})
    answer = post_commit(registry, token, [HEADER, *bundle_ops(folder)], repo=repo)
    assert answer.status_code == 200, answer.text


@pytest.fixture
def catalogue(registry, signing_key, tmp_path) -> dict[str, str]:
    """alice/sentiment 1.0.0 + 1.1.0 (1.0.0 yanked), acme/ner 1.0.0 + 2.0.0 (private, pushed
    by bob), a read token, an organisation, two keys."""
    alice = registry.user("alice", key=signing_key)
    bob_key = new_signing_key(tmp_path / "bob")
    bob = registry.user("bob", key=bob_key)
    registry.org("acme", "bob")
    with registry.session() as session:
        accounts.create_token(session, accounts.get_user(session, "alice"), name="ci",
                              scope="read")
    for version, seed in (("1.0.0", 0), ("1.1.0", 1)):
        publish(registry, alice, signed_bundle(tmp_path / f"s{version}", signing_key,
                                               name="sentiment", version=version, seed=seed,
                                               tags=["english"]), "alice/sentiment")
    for version, seed in (("1.0.0", 2), ("2.0.0", 3)):
        publish(registry, bob, signed_bundle(tmp_path / f"n{version}", bob_key, name="ner",
                                             version=version, seed=seed), "acme/ner",
                private=True)
    yanked = requests.post(f"{registry.url}/api/v1/adapters/alice/sentiment/versions/1.0.0/yank",
                           json={"reason": "bad labels"},
                           headers={"Authorization": f"Bearer {alice}"})
    assert yanked.status_code == 200, yanked.text
    requests.get(f"{registry.url}/alice/sentiment/resolve/main/adapter.safetensors")
    return {"alice": alice, "bob": bob}


def all_rows(app) -> dict[str, list[dict]]:
    """Every table's rows, encoded as the archive encodes them (datetimes in UTC)."""
    with db.engine(app).connect() as connection:
        return {t.name: [archive.encode_row(t, r) for r in connection.execute(
            select(t).order_by(*t.primary_key.columns))] for t in archive.tables()}


def files(registry, token: str) -> dict[str, bytes]:
    """repo@version/path -> bytes of every file of every version, downloaded over HTTP."""
    out = {}
    for repo in ("alice/sentiment", "acme/ner"):
        versions = requests.get(f"{registry.url}/api/v1/adapters/{repo}/versions",
                                headers={"Authorization": f"Bearer {token}"}).json()["items"]
        for v in versions:
            for path in ("README.md", "adapter.safetensors", "manifest.json", "model.sig"):
                got = requests.get(f"{registry.url}/{repo}/resolve/{v['version']}/{path}",
                                   headers={"Authorization": f"Bearer {token}"})
                assert got.status_code == 200, (repo, v["version"], path)
                out[f"{repo}@{v['version']}/{path}"] = got.content
    return out


def listing(registry, token: str) -> list:
    got = requests.get(f"{registry.url}/api/v1/adapters?sort=name",
                       headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200
    return got.json()["items"]


def test_round_trip_keeps_every_row_and_byte(registry, registry_config, catalogue, target,
                                             tmp_path):
    backup = tmp_path / "registry.tar"
    made = hub_registry(registry_config, "backup", str(backup), "--json")
    assert made.exit_code == 0, made.output
    summary = json.loads(made.stdout)
    blobs = all_rows(registry.app)["blobs"]
    assert len(blobs) == 16  # 4 versions x 4 files, all different
    assert (summary["blobs"], summary["blob_bytes"]) == (16, sum(b["size"] for b in blobs))
    assert summary["tables"]["versions"] == 4 and summary["tables"]["tokens"] == 3

    restored = hub_registry(target, "restore", str(backup))
    assert restored.exit_code == 0, restored.output
    assert restored.stdout.startswith(f"restored {sum(summary['tables'].values())} rows and "
                                      f"{summary['blobs']} blobs")
    copy, stop = start_registry(target)
    try:
        assert all_rows(copy.app) == all_rows(registry.app)
        assert listing(copy, catalogue["bob"]) == listing(registry, catalogue["bob"])
        assert files(copy, catalogue["bob"]) == files(registry, catalogue["bob"])
        # The restored tokens still sign in; new rows get fresh ids (sequences moved on).
        who = requests.get(f"{copy.url}/api/whoami-v2",
                           headers={"Authorization": f"Bearer {catalogue['alice']}"})
        assert who.json()["name"] == "alice"
        copy.user("carol")
        with copy.session() as session:
            assert accounts.get_user(session, "carol").id == 3
    finally:
        stop()


def test_the_tables_are_read_in_one_snapshot(registry):
    """A user created while the backup reads is in no table of it, not in some."""
    with create._snapshot(db.engine(registry.app)) as connection:
        users = select(func.count()).select_from(User)
        assert connection.scalar(users) == 0
        registry.user("late")
        assert connection.scalar(users) == 0
        assert connection.scalar(select(func.count()).select_from(Namespace)) == 0
    with registry.session() as session:
        assert session.scalar(users) == 1


@pytest.fixture
def backup(registry, registry_config, signing_key, tmp_path):
    """A backup of a deployment with one pushed version."""
    token = registry.user("alice", key=signing_key)
    publish(registry, token, signed_bundle(tmp_path / "b", signing_key), "alice/sst2")
    path = tmp_path / "small.tar"
    assert hub_registry(registry_config, "backup", str(path)).exit_code == 0
    return path


def rewrite(path, change) -> None:
    """Rewrite the tar at `path`, passing each member's (name, bytes) through `change`."""
    with tarfile.open(path) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            data = change(name, data)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def refused(result) -> tuple[str, str]:
    assert result.exit_code == 1, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if not line.startswith("table ")]
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: "), result.stderr
    return lines[0], lines[1]


def test_a_deployment_with_data_is_refused_unless_forced(backup, target):
    with db.session_scope(start_registry(target)[0].app) as session:
        accounts.create_user(session, "zed")
    error, hint = refused(hub_registry(target, "restore", str(backup)))
    assert error == "error: the deployment holds data: rows in namespaces (1), users (1)"
    assert "--force" in hint
    assert hub_registry(target, "restore", str(backup), "--force").exit_code == 0
    copy, stop = start_registry(target)
    try:
        with copy.session() as session:
            assert [u.name for u in session.scalars(select(accounts.User))] == ["alice"]
        assert requests.get(f"{copy.url}/alice/sst2/resolve/1.0.0/manifest.json").ok
    finally:
        stop()


def assert_empty(target) -> None:
    """The target deployment holds no row at all."""
    copy, stop = start_registry(target)
    try:
        assert all(not rows for rows in all_rows(copy.app).values())
    finally:
        stop()


def test_a_damaged_blob_is_named_and_nothing_is_written(backup, target):
    with tarfile.open(backup) as tar:
        victim = next(m.name for m in tar.getmembers() if m.name.startswith("blobs/"))
    rewrite(backup, lambda name, data: bytes([data[0] ^ 1]) + data[1:] if name == victim
            else data)
    error, hint = refused(hub_registry(target, "restore", str(backup)))
    sha = victim.removeprefix("blobs/")
    assert error.startswith(f"error: {backup}: blob {sha} is damaged (")
    assert hint == "hint: the archive is damaged; restore from another copy of it"
    assert_empty(target)


def test_a_truncated_archive_is_refused_and_nothing_is_written(backup, target):
    data = backup.read_bytes()
    backup.write_bytes(data[:len(data) // 2])
    error, hint = refused(hub_registry(target, "restore", str(backup)))
    assert error == f"error: {backup} is truncated or damaged: unexpected end of data"
    assert hint == "hint: the archive is damaged; restore from another copy of it"
    assert_empty(target)


def test_an_archive_of_another_schema_revision_is_refused(backup, target):
    def older(name, data):
        if name != archive.MANIFEST:
            return data
        return json.dumps({**json.loads(data), "revision": "0002"}).encode()

    rewrite(backup, older)
    error, hint = refused(hub_registry(target, "restore", str(backup)))
    assert error == f"error: {backup} holds schema revision 0002; this hub-registry is at 0004_requirements"
    assert "`hub-registry migrate`" in hint


def test_a_file_that_is_no_backup_is_refused(target, tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar file")
    error, hint = refused(hub_registry(target, "restore", str(junk)))
    assert error.startswith(f"error: cannot read {junk}: ")
    assert hint == "hint: pass a file written by `hub-registry backup`"


def test_a_manifest_naming_a_path_instead_of_a_digest_is_refused(backup, target, tmp_path):
    def escaping(name, data):
        if name != archive.MANIFEST:
            return data
        return json.dumps({**json.loads(data), "blobs": {"../../escaped": 3}}).encode()

    rewrite(backup, escaping)
    error, hint = refused(hub_registry(target, "restore", str(backup)))
    assert error.startswith(f"error: {backup}: backup.json lacks a revision")
    assert not list(tmp_path.rglob("escaped"))


def test_a_failed_backup_names_the_missing_blob_and_leaves_no_file(registry, registry_config,
                                                                   signing_key, tmp_path):
    token = registry.user("alice", key=signing_key)
    publish(registry, token, signed_bundle(tmp_path / "b", signing_key), "alice/sst2")
    lost = sorted((tmp_path / "instance" / "blobs").glob("??/??/*"))[0]
    lost.unlink()
    out = tmp_path / "out" / "registry.tar"
    error, hint = refused(hub_registry(registry_config, "backup", str(out)))
    assert error == f"error: blob {lost.name} is in the database but missing from storage"
    assert list((tmp_path / "out").iterdir()) == []


def test_blobs_go_through_s3_both_ways(backup, bucket, s3_endpoint, tmp_path):
    """Restore into an S3-backed deployment, back that up again: the same blobs, same bytes."""
    storage = make_storage(f"s3://{bucket}/registry", s3_endpoint_url=s3_endpoint)
    engine = make_engine(f"sqlite:///{tmp_path / 's3.db'}")
    migrate.upgrade(engine)
    restore.restore(engine, storage, backup)
    again = create.write_backup(engine, storage, tmp_path / "again.tar")
    assert again.blobs == 4
    assert blob_members(tmp_path / "again.tar") == blob_members(backup)


def blob_members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()
                if m.name.startswith("blobs/")}
