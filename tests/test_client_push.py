"""hub push against a real registry on localhost (and against it as a stand-in for the Hugging
Face Hub: same protocol)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from factories import make_adapter_dir, make_signed_bundle

from hubcli.remote import client as remote_api
from hubcli.bundle import make_bundle
from hubcli.cli.main import cli
from hubcli.errors import BundleError, ConflictError, NoSignatureError, RegistryError
from hubcli.signing.sign import create_signing_key


@pytest.fixture
def pusher(remote, registry_user):
    """A user with a signing key registered: returns (remote, user name)."""
    create_signing_key(name=registry_user[0])
    remote_api.upload_own_key(remote)
    return remote, registry_user[0]


def versions(remote, repo_id):
    return [v["version"] for v in remote_api.native(remote, "GET",
                                                    f"adapters/{repo_id}/versions")["items"]]


def test_push_publishes_version_as_tag(pusher, tmp_path):
    remote, user = pusher
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter", version="1.2.0")
    result = remote_api.push_bundle(remote, bundle)
    assert (result.repo_id, result.version, result.created) == (f"{user}/sst2-adapter",
                                                                "1.2.0", True)
    assert result.url == f"{remote.endpoint}/{user}/sst2-adapter"
    assert set(result.files) == {"manifest.json", "adapter.safetensors", "README.md", "model.sig"}
    with remote_api.client(remote) as api:
        refs = api.list_repo_refs(result.repo_id)
        info = api.model_info(result.repo_id, revision="1.2.0")
    assert [(t.name, t.target_commit) for t in refs.tags] == [("1.2.0", result.commit)]
    assert info.sha == result.commit
    assert sorted(s.rfilename for s in info.siblings) == sorted(result.files)


def test_push_same_version_same_content_is_a_no_op(pusher, tmp_path):
    remote, user = pusher
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter")
    first = remote_api.push_bundle(remote, bundle)
    notes: list[str] = []
    again = remote_api.push_bundle(remote, bundle, notify=notes.append)
    assert (again.created, again.commit) == (False, first.commit)
    assert notes == []  # the result says it (created False); the CLI prints it once
    assert versions(remote, first.repo_id) == ["1.0.0"]


def test_push_same_version_other_content_is_a_conflict(pusher, tmp_path):
    remote, user = pusher
    remote_api.push_bundle(remote, make_signed_bundle(tmp_path / "a" / "sst2-adapter",
                                                      name="sst2-adapter", seed=1))
    other = make_signed_bundle(tmp_path / "b" / "sst2-adapter", name="sst2-adapter", seed=2)
    with pytest.raises(ConflictError) as e:
        remote_api.push_bundle(remote, other)
    assert str(e.value) == (f"{user}/sst2-adapter version 1.0.0 is published already with "
                            "other content (README.md, adapter.safetensors, manifest.json, "
                            "model.sig differ); versions are immutable")
    assert e.value.hint.startswith("bump the version in manifest.json")
    assert (e.value.repo_id, e.value.revision, e.value.status) == (f"{user}/sst2-adapter",
                                                                   "1.0.0", 409)


def test_conflict_after_main_moved_on(pusher, tmp_path):
    """1.0.0 changed and pushed again after 1.1.0 is out: caught before any upload."""
    remote, user = pusher
    remote_api.push_bundle(remote, make_signed_bundle(tmp_path / "1" / "sst2-adapter",
                                                      name="sst2-adapter", seed=1))
    remote_api.push_bundle(remote, make_signed_bundle(tmp_path / "2" / "sst2-adapter",
                                                      name="sst2-adapter", version="1.1.0"))
    changed = make_signed_bundle(tmp_path / "3" / "sst2-adapter", name="sst2-adapter", seed=3)
    with pytest.raises(ConflictError, match="versions are immutable"):
        remote_api.push_bundle(remote, changed)
    assert versions(remote, f"{user}/sst2-adapter") == ["1.1.0", "1.0.0"]


def test_registry_409_maps_to_conflict_error(pusher, tmp_path):
    """A race the tag check cannot see (someone pushed in between): the registry's own 409."""
    from hubcli.remote.errors import translated

    remote, user = pusher
    repo_id = f"{user}/sst2-adapter"
    remote_api.push_bundle(remote, make_signed_bundle(tmp_path / "1" / "sst2-adapter",
                                                      name="sst2-adapter", seed=1))
    changed = make_signed_bundle(tmp_path / "2" / "sst2-adapter", name="sst2-adapter", seed=2)
    with pytest.raises(ConflictError) as e, remote_api.client(remote) as api, \
            translated(remote, repo_id=repo_id, revision="1.0.0"):
        api.upload_folder(repo_id=repo_id, folder_path=changed, commit_message="1.0.0")
    assert str(e.value) == (f"{remote.endpoint}: version 1.0.0 of {repo_id} exists with other "
                            "content; versions are immutable")
    assert e.value.hint.startswith("bump the version in manifest.json")
    assert e.value.status == 409


def test_unsigned_push_is_refused_before_any_request(tmp_path):
    bundle = make_adapter_dir(tmp_path / "sst2-adapter", name="sst2-adapter")
    make_bundle(bundle)
    nowhere = remote_api.Remote("http://127.0.0.1:9", "t")
    with pytest.raises(NoSignatureError) as e:
        remote_api.push_bundle(nowhere, bundle)
    assert e.value.hint == f"run `hub bundle {bundle}` then `hub sign {bundle}`"
    (bundle / "model.sig").write_text("{}")
    (bundle / "notes.txt").write_text("x")
    with pytest.raises(BundleError, match="file not allowed in a bundle"):
        remote_api.push_bundle(nowhere, bundle)


def test_push_signed_with_unregistered_key_says_keys_upload(remote, tmp_path):
    create_signing_key()
    with pytest.raises(RegistryError) as e:
        remote_api.push_bundle(remote, make_signed_bundle(tmp_path / "sst2-adapter",
                                                          name="sst2-adapter"))
    assert e.value.status == 422
    assert str(e.value).startswith(f"{remote.endpoint} answered 422: ")
    assert "`hub keys upload`" in e.value.hint


def test_push_large_weights_go_through_git_lfs(pusher, tmp_path, live_registry):
    from registry_server.db import db
    from registry_server.models import LfsUpload

    remote, _ = pusher
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter", hidden=384,
                                num_layers=6, bottleneck=64)
    assert (bundle / "adapter.safetensors").stat().st_size > 3_000_000
    remote_api.push_bundle(remote, bundle)
    with db.session_scope(live_registry.app) as session:
        uploaded = session.query(LfsUpload).count()
    assert uploaded >= 1


def test_push_cli_json(pusher, tmp_path):
    remote, user = pusher
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter")
    args = ["push", str(bundle), "--registry", remote.endpoint, "--token", remote.token,
            "--json"]
    out = json.loads(CliRunner().invoke(cli, args).stdout)
    assert (out["repo_id"], out["version"], out["created"], out["endpoint"]) == (
        f"{user}/sst2-adapter", "1.0.0", True, remote.endpoint)
    again = CliRunner().invoke(cli, args[:-1] + ["--quiet"])
    assert again.output == (f"{user}/sst2-adapter 1.0.0 was published already with the same "
                            f"files; nothing to do: {remote.endpoint}/{user}/sst2-adapter\n")


def test_push_to_hf_uses_the_hub_settings(pusher, tmp_path, monkeypatch):
    """`--to hf` with HF_ENDPOINT/HF_TOKEN pointing at our registry as a stand-in for the Hub."""
    import huggingface_hub.constants as constants

    remote, user = pusher
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", remote.endpoint)
    monkeypatch.setenv("HF_TOKEN", remote.token)
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter")
    result = CliRunner().invoke(cli, ["push", str(bundle), "--to", "hf", "--repo",
                                      f"{user}/sst2-adapter", "--json"])
    out = json.loads(result.stdout)
    assert (out["endpoint"], out["repo_id"], out["created"]) == (remote.endpoint,
                                                                 f"{user}/sst2-adapter", True)
    assert versions(remote, f"{user}/sst2-adapter") == ["1.0.0"]


def test_hf_target_respects_offline_mode(tmp_path):
    from hubcli.remote.credentials import hf_remote

    create_signing_key()
    bundle = make_signed_bundle(tmp_path / "sst2-adapter", name="sst2-adapter")
    with pytest.raises(RegistryError, match="huggingface_hub is in offline mode"):
        remote_api.push_bundle(hf_remote("hf_x", progress=False), bundle,
                               repo_id="alice/sst2-adapter")
