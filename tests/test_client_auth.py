"""hub login / logout / whoami and hub keys against a real registry on localhost."""

from __future__ import annotations

import json
import stat

import pytest
from click.testing import CliRunner

from hubcli.remote import credentials
from hubcli.remote import client as remote_api
from hubcli.cli.main import cli
from hubcli.errors import AuthError, RegistryError, SigningKeyError
from hubcli.settings import load_config


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


def test_login_checks_and_stores_token_owner_only(live_registry, registry_user):
    name, token = registry_user
    result = run("login", "--registry", live_registry.url, input=token + "\n")
    assert result.exit_code == 0, result.output
    assert f"logged in to {live_registry.url} as {name}" in result.output
    path = credentials.tokens_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {live_registry.url: token}
    assert load_config()["registry"] == live_registry.url
    # later commands find registry and token without flags
    assert credentials.registry_remote().token == token
    assert remote_api.whoami(credentials.registry_remote())["name"] == name


def test_login_with_bad_token_is_one_line_auth_error_and_stores_nothing(live_registry):
    with pytest.raises(AuthError) as e:
        credentials.login(live_registry.url, "hubr_not-a-token")
    assert str(e.value) == (f"{live_registry.url} refused the token: invalid or revoked token")
    assert e.value.status == 401
    assert not credentials.tokens_path().exists()
    result = run("login", "--registry", live_registry.url, "--token", "hubr_nope")
    assert result.exit_code == 1
    assert result.output.splitlines()[:2] == [
        f"error: {live_registry.url} refused the token: invalid or revoked token",
        f"hint: log in again: hub login --registry {live_registry.url}"]


def test_unreachable_registry_names_it_with_a_hint():
    with pytest.raises(RegistryError) as e:
        credentials.login("http://127.0.0.1:9", "hubr_x")
    assert str(e.value).startswith("cannot reach http://127.0.0.1:9 (")
    assert "hub-registry serve" in e.value.hint


def test_precedence_flag_then_environment_then_stored(live_registry, registry_user,
                                                      monkeypatch):
    credentials.login(live_registry.url, registry_user[1])
    assert credentials.registry_remote().endpoint == live_registry.url
    monkeypatch.setenv("HUB_ENDPOINT", "http://elsewhere:1/")
    monkeypatch.setenv("HUB_TOKEN", "from-env")
    assert credentials.registry_remote() == remote_api.Remote("http://elsewhere:1", "from-env")
    assert credentials.registry_remote("other:2", "from-flag") == remote_api.Remote(
        "http://other:2", "from-flag")
    monkeypatch.delenv("HUB_TOKEN")
    # the stored token belongs to its registry only
    assert credentials.registry_remote().token is None
    assert credentials.registry_remote(live_registry.url).token == registry_user[1]


def test_logout_forgets_only_that_registry(live_registry, registry_user):
    credentials.login(live_registry.url, registry_user[1])
    credentials._save_tokens({**credentials._tokens(), "http://other:1": "t"})
    assert run("logout", "--registry", live_registry.url).output == (
        f"logged out of {live_registry.url}\n")
    assert json.loads(credentials.tokens_path().read_text()) == {"http://other:1": "t"}
    assert "no token was stored" in run("logout", "--registry", live_registry.url).output


def test_whoami_json(live_registry, registry_user):
    name, token = registry_user
    result = run("whoami", "--registry", live_registry.url, "--token", token, "--json")
    assert json.loads(result.output) == {"registry": live_registry.url, "name": name,
                                         "orgs": [], "token_role": "write"}


def test_whoami_without_login_says_how(live_registry):
    result = run("whoami", "--registry", live_registry.url)
    assert result.exit_code == 1
    assert f"error: not logged in to {live_registry.url}" in result.output
    assert f"hint: log in: hub login --registry {live_registry.url}" in result.output


def test_keys_upload_registers_once(remote, signed_dir):
    from hubcli.signing.keys import key_id, public_key_path

    kid = key_id(public_key_path().read_bytes())
    key, created = remote_api.upload_own_key(remote)
    assert (key["key_id"], key["name"], created) == (kid, "alice", True)  # `hub keygen --name`
    key, created = remote_api.upload_own_key(remote, "laptop")
    assert (key["key_id"], key["name"], created) == (kid, "alice", False)
    assert [k["key_id"] for k in remote_api.list_keys(remote)] == [kid]
    result = run("keys", "list", "--registry", remote.endpoint, "--token", remote.token,
                 "--json")
    assert [k["key_id"] for k in json.loads(result.output)] == [kid]


def test_keys_upload_cli_without_keygen(remote):
    with pytest.raises(SigningKeyError, match="no public key at"):
        remote_api.upload_own_key(remote)
    result = run("keys", "upload", "--registry", remote.endpoint, "--token", remote.token)
    assert result.exit_code == 1 and "hint: create your key pair with `hub keygen`" in result.output


def test_keys_upload_refuses_a_public_key_that_is_not_ours(remote, signed_dir):
    from cryptography.hazmat.primitives.asymmetric import ec

    from hubcli.signing.keys import public_key_path, public_pem

    public_key_path().write_bytes(public_pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(SigningKeyError, match="is not the public half of your private key"):
        remote_api.upload_own_key(remote)
    assert remote_api.list_keys(remote) == []
