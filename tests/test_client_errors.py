"""Refusals of a real registry become hubcli.errors with one-line messages and hints."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from factories import make_signed_bundle

from hubcli.remote import client as remote_api
from hubcli.cli.main import cli
from hubcli.errors import AuthError, NotFoundError, RegistryError
from hubcli.remote.pull import pull
from hubcli.signing.sign import create_signing_key


@pytest.fixture
def private_adapter(remote, registry_user, tmp_path):
    create_signing_key()
    remote_api.upload_own_key(remote)
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter")
    return remote_api.push_bundle(remote, bundle, private=True)


def test_read_only_token_cannot_push(remote, tmp_path):
    read = remote_api.native(remote, "POST", "tokens", json={"name": "ci", "scope": "read"})
    reader = remote_api.Remote(remote.endpoint, read["token"], progress=False)
    create_signing_key()
    with pytest.raises(AuthError) as e:
        remote_api.push_bundle(reader, make_signed_bundle(tmp_path / "x", name="x"))
    assert str(e.value) == (f"{remote.endpoint} refused: token 'ci' has read scope; this needs "
                            "write scope")
    assert e.value.hint == "create a token with scope write"
    assert e.value.status == 403


def test_push_without_a_token_says_log_in(live_registry, tmp_path):
    create_signing_key()
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter")
    anonymous = remote_api.Remote(live_registry.url, progress=False)
    with pytest.raises(AuthError, match=f"^not logged in to {live_registry.url}$"):
        remote_api.push_bundle(anonymous, bundle)
    with pytest.raises(AuthError) as e:
        remote_api.push_bundle(anonymous, bundle, repo_id="alice/sst2-adapter")
    assert str(e.value) == f"{live_registry.url} refused: this needs a token"
    assert e.value.hint == f"log in: hub login --registry {live_registry.url}"


def test_private_adapter_is_not_found_for_others(private_adapter, live_registry):
    anonymous = remote_api.Remote(live_registry.url, progress=False)
    with pytest.raises(NotFoundError) as e:
        pull(private_adapter.repo_id, anonymous)
    assert str(e.value) == (f"{private_adapter.repo_id} does not exist or private on "
                            f"{live_registry.url}")
    assert "log in first" in e.value.hint
    stranger = remote_api.Remote(live_registry.url, live_registry.create_user("stranger"),
                                 progress=False)
    with pytest.raises(NotFoundError, match="does not exist on"):
        pull(private_adapter.repo_id, stranger)


def test_revoked_token_on_download_is_auth_error(private_adapter, remote):
    token_id = remote_api.native(remote, "GET", "tokens")["items"][0]["id"]
    remote_api.native(remote, "DELETE", f"tokens/{token_id}")
    with pytest.raises(AuthError, match="refused the token: invalid or revoked token"):
        pull(private_adapter.repo_id, remote)


def test_unreachable_registry_on_pull(tmp_path):
    with pytest.raises(RegistryError) as e:
        pull("alice/sst2-adapter", remote_api.Remote("http://127.0.0.1:9", progress=False))
    assert str(e.value) == "cannot reach http://127.0.0.1:9 (ConnectError)"
    assert e.value.hint.startswith("is the registry at http://127.0.0.1:9 running?")


def test_cli_prints_one_line_and_a_hint(live_registry, registry_user):
    result = CliRunner().invoke(cli, ["pull", "nobody/nothing@1.0.0", "--registry",
                                      live_registry.url, "--token", registry_user[1]])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[1:] == [
        f"error: nobody/nothing does not exist on {live_registry.url}",
        "hint: check the name (`hub search`); if it is private, log in first (`hub login`)",
        "(set HUB_DEBUG=1 for the full traceback)"]


def test_bad_reference_is_a_usage_error():
    result = CliRunner().invoke(cli, ["pull", "no-namespace"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: 'no-namespace' is not an adapter reference\n"
                                    "hint: use NAMESPACE/NAME or NAMESPACE/NAME@VERSION")
