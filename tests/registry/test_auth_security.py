"""Authentication and identity under attack (issue 18): redirects after sign-in, proof of
holding a signing key, one account per key, who signed a version, server-side sign-out,
look-alike names, the sign-in throttle, CSRF on every form and tokens that may not write.
Through the Flask test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import time

from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from sqlalchemy import update

from conftest import new_signing_key
from hubcli.signing.keys import sign_challenge
from registry_server import create_app
from registry_server.db import db
from registry_server.errors import Conflict
from registry_server.services import accounts
from registry_server.ui import passwords
from registry_server.ui.models import LoginFailure
from ui_seed import (DATABASES, PASSWORD, csrf_token, make_app, publish, sign_in,
                     signed_bundle)


@pytest.fixture(params=DATABASES)
def app(request, tmp_path):
    """alice and bob (password PASSWORD each), both members of the organisation `team`."""
    apps = make_app(request.param, tmp_path)
    app = next(apps)
    with db.session_scope(app) as session:
        for name in ("alice", "bob"):
            passwords.set_password(session, accounts.create_user(session, name), PASSWORD)
        accounts.create_org(session, "team", members=["alice", "bob"])
    yield app
    next(apps, None)


def token(app, user: str, scope: str = "write") -> dict:
    with db.session_scope(app) as session:
        secret = accounts.create_token(session, accounts.get_user(session, user), scope=scope)[1]
    return {"Authorization": f"Bearer {secret}"}


def text(response) -> str:
    return response.get_data(as_text=True)


# --- 1. redirects after sign-in --------------------------------------------------------------

EVIL = ["//evil.example", "///evil.example", "/\\evil.example", "\\\\evil.example",
        "/\t/evil.example", "/\\/evil.example", " //evil.example", "\x00//evil.example",
        "https://evil.example/", "http:evil.example", "javascript:alert(1)",
        "\r\nSet-Cookie: x=1", "/\r\n/evil.example", "evil.example", ""]


@pytest.mark.parametrize("target", EVIL)
def test_sign_in_never_redirects_off_site(app, target):
    client = app.test_client()
    form = {"csrf_token": csrf_token(text(client.get("/login"))), "name": "alice",
            "password": PASSWORD, "next": target}
    r = client.post("/login", data=form)
    if "\x00" in target:
        # A NUL byte in any field is refused at the edge (both databases alike), before sign-in.
        assert r.status_code == 400 and "Location" not in r.headers and "next" in text(r)
        return
    assert r.status_code == 302 and r.headers["Location"] == "/"
    # The same target in the query string: the form repeats the normalised one.
    page = client.get("/login", query_string={"next": target})
    assert page.status_code == 200 and 'name="next" value="/"' in text(page)


@pytest.mark.parametrize("query", ["next=/%09/evil.example", "next=%0d%0a/evil",
                                   "next=/%0d%0aSet-Cookie:x=1", "next=%2F%2Fevil.example"])
def test_sign_in_with_an_encoded_next_in_the_url(app, query):
    client = app.test_client()
    form = {"csrf_token": csrf_token(text(client.get("/login"))), "name": "alice",
            "password": PASSWORD}
    r = client.post(f"/login?{query}", data=form)
    location = r.headers["Location"]
    assert r.status_code == 302 and location.startswith("/") and not location.startswith("//")
    assert "\r" not in location and "\n" not in location and "evil.example" not in location


def test_sign_in_keeps_local_targets(app):
    client = app.test_client()
    r = client.get("/settings?tab=keys")
    assert r.status_code == 302 and r.headers["Location"] == "/login?next=/settings?tab%3Dkeys"
    form = {"csrf_token": csrf_token(text(client.get("/login"))), "name": "alice",
            "password": PASSWORD, "next": "/settings?tab=keys"}
    assert client.post("/login", data=form).headers["Location"] == "/settings?tab=keys"


# --- 2. proof of possession, one account per key, who signed ---------------------------------

UNUSABLE = "the key challenge is unknown, used or expired"


def challenge(client, headers) -> str:
    r = client.post("/api/v1/keys/challenge", headers=headers)
    assert r.status_code == 201 and r.json["challenge"].startswith(accounts.CHALLENGE_PREFIX)
    return r.json["challenge"]


def register(client, headers, key, *, signer=None, nonce: str | None = None):
    """POST /api/v1/keys for `key`'s public half, proving with `signer`'s private key."""
    nonce = nonce or challenge(client, headers)
    private = serialization.load_pem_private_key((signer or key).private_path.read_bytes(), None)
    body = {"pem": key.public_pem, "challenge": nonce,
            "signature": sign_challenge(private, nonce)}
    return client.post("/api/v1/keys", headers=headers, json=body)


def test_a_public_key_needs_proof_of_its_private_key(app, tmp_path):
    bob_key, alice_key = new_signing_key(tmp_path / "bob"), new_signing_key(tmp_path / "alice")
    client, alice = app.test_client(), token(app, "alice")
    r = client.post("/api/v1/keys", headers=alice, json={"pem": bob_key.public_pem})
    assert r.status_code == 400 and r.json["error"] == "field 'challenge' is required"
    r = register(client, alice, bob_key, signer=alice_key)  # she holds only her own key
    assert r.status_code == 403 and r.json["code"] == "KeyProofRejected"
    assert r.json["error"].startswith("the signature does not prove holding the private key of")
    nonce = challenge(client, alice)
    r = client.post("/api/v1/keys", headers=alice,
                    json={"pem": bob_key.public_pem, "challenge": nonce, "signature": "AAAA"})
    assert r.status_code == 403
    assert register(client, alice, bob_key, nonce=nonce).status_code == 403  # spent above
    bobs = challenge(client, token(app, "bob"))
    r = register(client, alice, alice_key, nonce=bobs)  # issued to bob
    assert r.status_code == 403 and r.json["error"] == UNUSABLE
    r = register(client, alice, alice_key, nonce=accounts.CHALLENGE_PREFIX + "made-up")
    assert r.status_code == 403
    assert client.get("/api/v1/keys", headers=alice).json["items"] == []
    r = register(client, alice, alice_key)
    assert r.status_code == 201 and r.json["key_id"].startswith("sha256:")


def test_a_key_challenge_expires(app, tmp_path):
    app.config["KEY_CHALLENGE_TTL"] = 0
    r = register(app.test_client(), token(app, "alice"), new_signing_key(tmp_path))
    assert r.status_code == 403 and r.json["error"] == UNUSABLE


def test_a_read_token_gets_no_key_challenge(app):
    r = app.test_client().post("/api/v1/keys/challenge", headers=token(app, "alice", "read"))
    assert r.status_code == 403 and "has read scope" in r.json["error"]


def test_a_key_belongs_to_one_account(app, tmp_path):
    shared = new_signing_key(tmp_path)  # say bob handed alice a copy of his private key
    client, bob = app.test_client(), token(app, "bob")
    assert register(client, bob, shared).status_code == 201
    r = register(client, bob, shared)
    assert r.status_code == 409 and r.json["error"].endswith("is registered already")
    r = register(client, token(app, "alice"), shared)
    assert r.status_code == 409
    assert r.json["error"].endswith("is registered to another account; a key belongs to one "
                                    "account")
    with db.session_scope(app) as session, pytest.raises(Conflict, match="another account"):
        accounts.add_public_key(session, accounts.get_user(session, "alice"), shared.public_pem)


def test_the_signer_is_the_keys_owner_not_the_pusher(app, tmp_path, monkeypatch):
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "hub_home"))
    bob_key = new_signing_key(tmp_path / "keys")
    # Before proofs were required alice registered bob's public key and pushed his bundle;
    # now the key is bob's (he proved it), and the page must not credit alice.
    with db.session_scope(app) as session:
        accounts.add_public_key(session, accounts.get_user(session, "alice"), bob_key.public_pem)
    publish(app, "alice", signed_bundle(tmp_path / "b", bob_key, name="shared"), namespace="team")
    with db.session_scope(app) as session:
        alice = accounts.get_user(session, "alice")
        [key] = accounts.list_public_keys(session, alice)
        accounts.delete_public_key(session, alice, key.key_id)
    assert "no longer registered to any account (published by alice)" in text(
        app.test_client().get("/team/shared"))
    assert register(app.test_client(), token(app, "bob"), bob_key).status_code == 201
    page = text(app.test_client().get("/team/shared"))
    assert ('Signed by a key registered to\n        <a href="/bob">bob</a>, not to the publisher'
            ' (alice).') in page
    assert "registered to\n        <a href=\"/alice\">" not in page
    version = app.test_client().get("/api/v1/adapters/team/shared/versions/1.0.0").json
    assert (version["signer"], version["pushed_by"]) == ("bob", "alice")
    listing = app.test_client().get("/api/v1/adapters/team/shared/versions").json["items"]
    assert [v["signer"] for v in listing] == ["bob"]


def test_web_settings_point_to_hub_keys_upload(app):
    client = app.test_client()
    sign_in(client)
    page = text(client.get("/settings"))
    assert "<code>hub keys upload</code> signs a one-time challenge" in page
    r = client.post("/settings/keys", data={"pem": "x"})
    assert r.status_code == 405


# --- 3. sign-out and password changes end sessions on the server ------------------------------

def captured_cookie(client) -> str:
    return client.get_cookie("session").value


def replay(app, cookie: str) -> int:
    thief = app.test_client()
    thief.set_cookie("session", cookie)
    return thief.get("/settings").status_code


def test_a_cookie_captured_before_sign_out_opens_nothing(app):
    client = app.test_client()
    sign_in(client)
    cookie = captured_cookie(client)
    assert replay(app, cookie) == 200
    r = client.post("/logout", data={"csrf_token": csrf_token(text(client.get("/")))})
    assert r.status_code == 302
    assert replay(app, cookie) == 302


def test_a_cookie_captured_before_a_password_change_opens_nothing(app):
    client, other = app.test_client(), app.test_client()
    sign_in(client)
    sign_in(other)
    cookie = captured_cookie(client)
    form = {"csrf_token": csrf_token(text(client.get("/settings"))), "current": PASSWORD,
            "password": "a new password", "password2": "a new password"}
    assert client.post("/settings/password", data=form).status_code == 302
    assert replay(app, cookie) == 302
    assert other.get("/settings").status_code == 302
    assert client.get("/settings").status_code == 200  # this browser got a new session


# --- 4. look-alike names ---------------------------------------------------------------------

@pytest.mark.parametrize("name, message", [
    ("Alice", "the name 'Alice' is taken: it differs from 'alice' only in case"),
    ("TEAM", "the name 'TEAM' is taken: it differs from 'team' only in case"),
    ("alice", "the name 'alice' is taken")])
def test_names_differing_only_in_case_are_taken(app, name, message):
    with db.session_scope(app) as session:
        with pytest.raises(Conflict) as user_error:
            accounts.create_user(session, name)
        with pytest.raises(Conflict) as org_error:
            accounts.create_org(session, name)
    assert str(user_error.value) == str(org_error.value) == message
    assert user_error.value.status == 409


def test_repositories_differing_only_in_case_are_taken(app):
    client, alice = app.test_client(), token(app, "alice")
    assert client.post("/api/repos/create", headers=alice, json={"name": "up"}).status_code == 200
    r = client.post("/api/repos/create", headers=alice, json={"name": "Up"})
    assert r.status_code == 409
    assert r.json["error"] == ("repository alice/up exists already "
                               "(names may not differ only in case)")
    r = client.post("/api/repos/create", headers=token(app, "bob"), json={"name": "Up"})
    assert r.status_code == 200  # another namespace


# --- 5. sign-in throttle ---------------------------------------------------------------------

def attempt(client, password: str, address: str = "10.0.0.1"):
    form = {"csrf_token": csrf_token(text(client.get("/login"))), "name": "alice",
            "password": password}
    return client.post("/login", data=form, environ_base={"REMOTE_ADDR": address})


def test_wrong_passwords_are_throttled_across_workers(app):
    # A second app over the same database stands for a second gunicorn worker.
    other_app = create_app({"INSTANCE_PATH": app.instance_path, "SECRET_KEY": "test-secret",
                            "DATABASE_URL": app.config["DATABASE_URL"]})
    client = app.test_client()
    started = time.monotonic()
    for _ in range(app.config["LOGIN_MAX_FAILURES"]):
        assert attempt(client, "wrong password").status_code == 400
    for each in (client, other_app.test_client()):
        r = attempt(each, PASSWORD)
        assert r.status_code == 429 and "Too many wrong passwords; try again in" in text(r)
        # the 600 s window counts from the first failure; a slow machine has used some of it
        waited = time.monotonic() - started
        assert 600 - waited - 1 <= int(r.headers["Retry-After"]) <= 600
    assert attempt(client, PASSWORD, "10.0.0.2").status_code == 302  # another address
    assert attempt(app.test_client(), "wrong", "10.0.0.3").status_code == 400
    with db.session_scope(app) as session:  # the window passes
        session.execute(update(LoginFailure).values(at=LoginFailure.at - timedelta(minutes=11)))
        session.commit()
    assert attempt(client, PASSWORD).status_code == 302
    db.engine(other_app).dispose()


# --- what held: CSRF on every form, tokens that may not write ------------------------------

def test_every_form_needs_the_csrf_token(app):
    client = app.test_client()
    sign_in(client)
    posts = [rule for rule in app.url_map.iter_rules()
             if rule.endpoint.startswith("ui.") and "POST" in rule.methods]
    assert len(posts) == 8  # ... and the adapter page's "Try it" box
    for rule in posts:
        path = re.sub(r"<\w+>", "x", rule.rule.replace("<int:token_id>", "1"))
        r = client.post(path, data={"name": "x", "password": PASSWORD})
        assert r.status_code == 400, path
        assert "this form has expired or did not come from this site" in text(r), path
    assert client.get("/settings").status_code == 200  # not even signed out


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/api/repos/create", {"name": "x"}),
    ("POST", "/api/v1/keys/challenge", None),
    ("POST", "/api/v1/tokens", {"name": "more"}),
    ("DELETE", "/api/v1/tokens/1", None),
    ("POST", "/api/models/alice/x/commit/main", None)])
def test_read_and_revoked_tokens_cannot_write(app, method, path, body):
    client = app.test_client()
    r = client.open(path, method=method, headers=token(app, "alice", "read"), json=body)
    assert r.status_code == 403
    assert r.json["error"].endswith("has read scope; this needs write scope")
    headers = token(app, "alice")
    with db.session_scope(app) as session:
        alice = accounts.get_user(session, "alice")
        accounts.revoke_token(session, alice, accounts.list_tokens(session, alice)[-1].id)
    r = client.open(path, method=method, headers=headers, json=body)
    assert r.status_code == 401 and r.json["error"] == "invalid or revoked token"


# --- the migration --------------------------------------------------------------------------

def test_migration_drops_shared_keys_and_refuses_look_alikes(tmp_path):
    from alembic import command
    from sqlalchemy import create_engine, text as sql

    from registry_server import migrate

    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")

    def upgrade(to: str) -> None:
        with engine.begin() as connection:
            cfg = migrate.alembic_config()
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, to)

    upgrade("0002")
    with engine.begin() as c:
        c.execute(sql("INSERT INTO namespaces (id, name, kind, created_at) VALUES "
                      "(1, 'alice', 'user', '2026-01-01'), (2, 'bob', 'user', '2026-01-01'),"
                      "(3, 'Bob', 'org', '2026-01-01')"))
        c.execute(sql("INSERT INTO users (id, namespace_id, is_admin, created_at) VALUES "
                      "(1, 1, 0, '2026-01-01'), (2, 2, 0, '2026-01-01')"))
        c.execute(sql("INSERT INTO public_keys (user_id, key_id, name, pem, created_at) VALUES "
                      "(1, 'sha256:shared', '', '', '2026-01-01'),"
                      "(2, 'sha256:shared', '', '', '2026-01-01'),"
                      "(2, 'sha256:bobs', '', '', '2026-01-01')"))
    with pytest.raises(RuntimeError, match="namespaces differing only in case: bob; rename"):
        upgrade("head")
    with engine.begin() as c:
        c.execute(sql("UPDATE namespaces SET name = 'bobs-team' WHERE id = 3"))
    upgrade("head")
    with engine.connect() as c:
        assert c.execute(sql("SELECT key_id FROM public_keys")).scalars().all() == ["sha256:bobs"]
    engine.dispose()
