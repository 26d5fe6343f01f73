"""`hub-registry` administration commands on the embedded default (SQLite + disk, zero config)."""

from __future__ import annotations

import hashlib
import os
import re
import time

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from registry_server import create_app
from registry_server.cli import cli
from registry_server.db import db
from registry_server.models import Membership, PublicKey, Token
from registry_server.services import accounts


@pytest.fixture
def instance(tmp_path, monkeypatch):
    path = tmp_path / "instance"
    monkeypatch.setenv("HUB_REGISTRY_INSTANCE_PATH", str(path))
    return path


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_create_user_prints_a_token_once_and_stores_its_hash(instance):
    result = run("create-user", "alice", "--admin")
    assert result.exit_code == 0
    secret = re.search(r"token \(shown once\): (hubr_\S+)", result.output).group(1)
    assert (instance / "registry.db").exists() and (instance / "secret_key").exists()
    app = create_app()
    with db.session_scope(app) as session:
        token = session.scalar(select(Token))
        assert token.token_hash == hashlib.sha256(secret.encode()).hexdigest()
        assert token.user.is_admin and token.scope == "write"


def test_orgs_members_tokens_and_keys(instance, signing_key, tmp_path):
    assert run("create-user", "alice").exit_code == 0
    assert run("create-user", "bob").exit_code == 0
    assert run("create-org", "acme", "--member", "alice").output == (
        "created organisation acme with alice\n")
    assert run("add-member", "acme", "bob").exit_code == 0
    made = run("create-token", "bob", "--name", "ci", "--scope", "read")
    assert re.fullmatch(r"token 3 \(read\) for bob \(shown once\): hubr_\S+\n", made.output)
    pem = tmp_path / "key.pub.pem"
    pem.write_text(signing_key.public_pem)
    assert run("add-key", "alice", str(pem)).output.startswith("registered sha256:")
    assert run("revoke-token", "bob", "3").output == "revoked token 3\n"
    with db.session_scope(create_app()) as session:
        assert len(session.scalars(select(Membership)).all()) == 2
        assert session.scalar(select(PublicKey)).user_id == accounts.get_user(session,
                                                                              "alice").id
        assert session.get(Token, 3).revoked_at is not None


def test_errors_are_one_line_with_a_hint(instance):
    run("create-user", "alice")
    result = CliRunner().invoke(cli, ["create-user", "alice"])
    assert result.exit_code == 1
    assert "error: the name 'alice' is taken" in result.output
    unknown = CliRunner().invoke(cli, ["create-org", "acme", "--member", "nobody"])
    assert "error: no user named 'nobody'" in unknown.output


def test_migrate_and_gc(instance):
    assert run("migrate").output == "database is up to date\n"
    orphan = instance / "blobs" / "ab" / "cd" / ("abcd" + "0" * 60)
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"left by a refused push")
    assert run("gc").output == "removed 0 unreferenced blobs\n"  # too young
    assert run("gc", "--grace-hours", "0", "--dry-run").output == (
        "would remove 1 unreferenced blobs\n")
    assert run("gc", "--grace-hours", "0").output == "removed 1 unreferenced blobs\n"
    assert not orphan.exists()


def test_start_and_gc_remove_stale_staging_and_keep_pushes_in_progress(instance):
    run("migrate")
    staging = instance / "tmp"
    stale, fresh = staging / "commit-dead", staging / "commit-live"
    for folder in (stale, fresh):
        (folder / "bundle").mkdir(parents=True)
        (folder / "staged-2").write_bytes(b"x" * 1000)
    (staging / "lfs-dead").write_bytes(b"y")
    day_ago = time.time() - 24 * 3600
    for path in (stale / "bundle", stale / "staged-2", stale, staging / "lfs-dead",
                 fresh / "bundle", fresh):
        os.utime(path, (day_ago, day_ago))  # the live push still writes staged-2
    create_app()
    assert sorted(p.name for p in staging.iterdir()) == ["commit-live"]
    os.utime(fresh / "staged-2", (day_ago, day_ago))
    assert run("gc").output == "removed 0 unreferenced blobs\n"
    assert list(staging.iterdir()) == []
