"""Signing in and out, setting passwords, CSRF, and the settings page (API tokens shown once,
revoked; public keys listed and removed), through the Flask test client."""

from __future__ import annotations

from dataclasses import dataclass

import re

import pytest

from conftest import new_signing_key
from registry_server.db import db
from registry_server.services import accounts, repos
from registry_server.ui import passwords
from ui_seed import DATABASES, PASSWORD, csrf_token, make_app, publish, sign_in, signed_bundle


@dataclass
class Site:
    app: object
    write_token: str  # alice's
    read_token: str  # alice's


@pytest.fixture(params=["sqlite"])
def site(request, tmp_path):
    """alice (password PASSWORD, a write and a read token) and carol (no password). SQLite
    only, except where a test asks for DATABASES: accounts do not depend on the database."""
    apps = make_app(request.param, tmp_path)
    app = next(apps)
    with db.session_scope(app) as session:
        alice = accounts.create_user(session, "alice")
        passwords.set_password(session, alice, PASSWORD)
        accounts.create_user(session, "carol")
        write = accounts.create_token(session, alice, name="cli", scope="write")[1]
        read = accounts.create_token(session, alice, name="ro", scope="read")[1]
    yield Site(app, write, read)
    next(apps, None)


def text(response) -> str:
    return response.get_data(as_text=True)


def post_form(client, page: str, action: str, **data):
    """Submit a form of `page` to `action`, with the page's CSRF token."""
    token = csrf_token(text(client.get(page)))
    return client.post(action, data={"csrf_token": token, **data})


def result_count(response) -> int:
    """The number of adapters a search page reports."""
    return int(re.search(r'id="results-h"[^>]*>\s*([\d,]+) adapter', text(response))[1])


def bearer(site: Site, secret: str) -> int:
    client = site.app.test_client()
    return client.get("/api/whoami-v2", headers={"Authorization": f"Bearer {secret}"}).status_code


def test_sign_in_and_out(site):
    client = site.app.test_client()
    r = sign_in(client)
    assert r.status_code == 302 and r.headers["Location"] == "/"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    assert 'href="/settings">Settings</a>' in text(client.get("/"))
    assert "You are signed in as alice" in text(client.get("/logout"))  # GET only asks
    r = post_form(client, "/", "/logout")
    assert r.status_code == 302
    home = text(client.get("/"))
    assert "Sign in</a>" in home and "You are signed out." in home


def test_session_cookie_is_secure_over_https(site):
    client = site.app.test_client()
    token = csrf_token(text(client.get("/login", base_url="https://localhost")))
    r = client.post("/login", base_url="https://localhost",
                    data={"csrf_token": token, "name": "alice", "password": PASSWORD})
    assert "Secure" in r.headers["Set-Cookie"]


@pytest.mark.parametrize("name, password", [("alice", "wrong password"), ("nobody", PASSWORD),
                                            ("carol", PASSWORD)])  # carol has no password
def test_sign_in_refused(site, name, password):
    client = site.app.test_client()
    r = sign_in(client, name, password)
    assert r.status_code == 400 and "Wrong name or password." in text(r)
    assert client.get("/settings").status_code == 302


@pytest.mark.parametrize("target, landing", [("/alice", "/alice"), ("//evil.example/x", "/"),
                                             ("https://evil.example/", "/")])
def test_sign_in_returns_only_to_local_pages(site, target, landing):
    client = site.app.test_client()
    r = post_form(client, "/login", "/login", name="alice", password=PASSWORD, next=target)
    assert r.headers["Location"] == landing


def test_settings_needs_sign_in(site):
    r = site.app.test_client().get("/settings")
    assert r.status_code == 302 and r.headers["Location"] == "/login?next=/settings"


@pytest.mark.parametrize("sent", [None, "forged"])
def test_forms_without_the_csrf_token_are_refused(site, sent):
    client = site.app.test_client()
    sign_in(client)
    data = {"name": "stolen", "scope": "write"}
    if sent:
        data["csrf_token"] = sent
    r = client.post("/settings/tokens", data=data)
    assert r.status_code == 400 and r.mimetype == "text/html"
    assert "this form has expired or did not come from this site" in text(r)
    with db.session_scope(site.app) as session:
        tokens = accounts.list_tokens(session, accounts.get_user(session, "alice"))
        assert "stolen" not in [t.name for t in tokens]
    r = site.app.test_client().post("/login", data={"name": "alice", "password": PASSWORD})
    assert r.status_code == 400


def token_ids(site: Site) -> dict[str, int]:
    """alice's live tokens by name."""
    with db.session_scope(site.app) as session:
        tokens = accounts.list_tokens(session, accounts.get_user(session, "alice"))
        return {t.name: t.id for t in tokens if t.revoked_at is None}


def test_new_token_is_shown_once_after_a_redirect_then_revoked(site):
    client = site.app.test_client()
    sign_in(client)
    r = post_form(client, "/settings", "/settings/tokens", name="laptop", scope="write")
    # Post-redirect-get: reloading the page that shows the token posts nothing.
    assert r.status_code == 303 and r.headers["Location"] == "/settings#tokens"
    assert "hubr_" not in r.headers.get("Set-Cookie", "")  # the secret travels encrypted
    landing = client.get("/settings")
    assert landing.headers["Cache-Control"] == "no-store"
    html = text(landing)
    assert "it is shown only this once" in html
    secret = html.split('aria-label="New API token">')[1].split("<")[0]
    assert secret.startswith("hubr_") and bearer(site, secret) == 200
    listing = text(client.get("/settings"))  # the reload
    assert secret not in listing and f"{secret[:12]}…" in listing
    assert "shown only this once" not in listing
    assert sorted(token_ids(site)) == ["cli", "laptop", "ro"]
    r = post_form(client, "/settings", f"/settings/tokens/{token_ids(site)['laptop']}/revoke")
    assert r.status_code == 303
    html = text(client.get("/settings"))
    assert "Token &#39;laptop&#39; is revoked." in html
    # Revoked tokens leave the table (and its Revoke buttons) for a folded list.
    live, folded = html.split('class="revoked-tokens"')
    assert "Revoke token laptop" not in live and "<strong>laptop</strong>" in folded
    assert bearer(site, secret) == 401


def test_token_names_are_unique_among_live_tokens(site):
    client = site.app.test_client()
    sign_in(client)
    r = post_form(client, "/settings", "/settings/tokens", name="CLI", scope="read")
    assert r.status_code == 409
    assert "you already have a token named &#39;CLI&#39;" in text(r)
    assert 'value="CLI"' in text(r)  # the form keeps what was typed
    post_form(client, "/settings", f"/settings/tokens/{token_ids(site)['cli']}/revoke")
    r = post_form(client, "/settings", "/settings/tokens", name="cli", scope="read")
    assert r.status_code == 303 and sorted(token_ids(site)) == ["cli", "ro"]
    # Unnamed tokens (API, hub-registry create-token) are numbered instead of clashing.
    with db.session_scope(site.app) as session:
        alice = accounts.get_user(session, "alice")
        names = [accounts.create_token(session, alice)[0].name for _ in range(3)]
    assert names == ["token", "token-2", "token-3"]


def test_token_form_errors(site):
    client = site.app.test_client()
    sign_in(client)
    r = post_form(client, "/settings", "/settings/tokens", name="x", scope="admin")
    assert r.status_code == 400 and "token scope &#39;admin&#39; is not one of read, write" in text(r)


def test_cannot_revoke_another_users_token(site):
    with db.session_scope(site.app) as session:
        carol = accounts.get_user(session, "carol")
        passwords.set_password(session, carol, PASSWORD)
        alice = accounts.get_user(session, "alice")
        token_id = accounts.list_tokens(session, alice)[0].id
    client = site.app.test_client()
    sign_in(client, "carol")
    r = post_form(client, "/settings", f"/settings/tokens/{token_id}/revoke")
    assert r.status_code == 404 and r.mimetype == "text/html"
    assert bearer(site, site.write_token) == 200


def test_list_and_remove_a_public_key(site, tmp_path):
    key = new_signing_key(tmp_path / "keys")
    with db.session_scope(site.app) as session:
        registered = accounts.add_public_key(session, accounts.get_user(session, "alice"),
                                             key.public_pem, name="laptop")
        key_id = registered.key_id
    client = site.app.test_client()
    sign_in(client)
    html = text(client.get("/settings"))
    assert f'<code class="hash">{key_id}</code>' in html and "<strong>laptop</strong>" in html
    assert 'aria-label="Remove key laptop…"' in html  # a two-step button
    r = post_form(client, "/settings", "/settings/keys/delete", key_id=key_id)
    assert r.status_code == 303
    html = text(client.get("/settings"))
    assert f"Key {key_id} is removed." in html and "You have no signing keys yet" in html


def test_set_password_with_an_api_token(site):
    client = site.app.test_client()
    form = {"name": "alice", "password": "a new password", "password2": "a new password"}
    for token, name in ((site.read_token, "alice"), (site.write_token, "carol"),
                        ("hubr_unknown", "alice")):
        r = post_form(client, "/login/password", "/login/password", **{**form, "token": token,
                                                                         "name": name})
        assert r.status_code == 400 and "That is not a write token of this user." in text(r)
    r = post_form(client, "/login/password", "/login/password",
                  **{**form, "token": site.write_token, "password2": "different"})
    assert r.status_code == 400 and "The two passwords differ." in text(r)
    r = post_form(client, "/login/password", "/login/password", **form, token=site.write_token)
    assert r.status_code == 302 and r.headers["Location"] == "/settings"
    assert client.get("/settings").status_code == 200  # signed in
    assert sign_in(site.app.test_client(), "alice", "a new password").status_code == 302


def test_changing_the_password_signs_out_other_browsers(site):
    here, elsewhere = site.app.test_client(), site.app.test_client()
    sign_in(here)
    sign_in(elsewhere)
    r = post_form(here, "/settings", "/settings/password", current="wrong",
                  password="x" * 10, password2="x" * 10)
    assert r.status_code == 400 and "The current password is wrong." in text(r)
    r = post_form(here, "/settings", "/settings/password", current=PASSWORD,
                  password="short", password2="short")
    assert r.status_code == 400 and "a password must have 8 to 1024 characters" in text(r)
    r = post_form(here, "/settings", "/settings/password", current=PASSWORD,
                  password="x" * 10, password2="x" * 10)
    assert r.status_code == 302
    assert here.get("/settings").status_code == 200
    assert elsewhere.get("/settings").status_code == 302


def test_adapter_without_versions_has_an_empty_state(site):
    with db.session_scope(site.app) as session:
        repos.create_adapter(session, accounts.get_user(session, "alice"), "alice", "draft")
    r = site.app.test_client().get("/alice/draft")
    assert r.status_code == 200 and "No version yet" in text(r)
    assert "draft" not in text(site.app.test_client().get("/alice"))  # listings skip it


def test_set_password_command(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from registry_server import create_app
    from registry_server.cli import cli

    monkeypatch.setenv("HUB_REGISTRY_INSTANCE_PATH", str(tmp_path / "instance"))
    runner = CliRunner()
    assert runner.invoke(cli, ["create-user", "carol"]).exit_code == 0
    result = runner.invoke(cli, ["set-password", "carol"],
                           input="carols password\ncarols password\n")
    assert result.exit_code == 0 and "password set for carol" in result.output
    assert sign_in(create_app().test_client(), "carol", "carols password").status_code == 302
    result = runner.invoke(cli, ["set-password", "nobody"], input="x\nx\n")
    assert result.exit_code == 1 and "error: no user named 'nobody'" in result.output


@pytest.mark.parametrize("site", DATABASES, indirect=True)
def test_signed_only_drops_adapters_whose_key_was_removed(site, tmp_path, monkeypatch):
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "hub_home"))
    key = new_signing_key(tmp_path / "keys")
    with db.session_scope(site.app) as session:
        accounts.add_public_key(session, accounts.get_user(session, "alice"), key.public_pem)
    publish(site.app, "alice", signed_bundle(tmp_path / "b", key, name="keyed"))
    client = site.app.test_client()
    assert result_count(client.get("/search?signed=1")) == 1
    sign_in(client)
    post_form(client, "/settings", "/settings/keys/delete",
              key_id=text(client.get("/settings")).split('name="key_id" value="')[1].split('"')[0])
    assert result_count(client.get("/search?signed=1")) == 0
    assert result_count(client.get("/search")) == 1
    assert "no longer registered to any account" in text(client.get("/alice/keyed"))
