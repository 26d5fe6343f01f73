"""The registry against the real huggingface_hub client (and transformers' file lookup), over
SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import requests
from conftest import new_signing_key, signed_bundle
from huggingface_hub.errors import (EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError,
                                    RevisionNotFoundError)

from registry_server.models import LfsUpload, Version
from sqlalchemy import select

BUNDLE_FILES = ["README.md", "adapter.safetensors", "manifest.json", "model.sig"]


@pytest.fixture
def alice(registry, signing_key) -> str:
    return registry.user("alice", key=signing_key)


def _api(hf, registry, token):
    return hf.HfApi(endpoint=registry.url, token=token)


def push(api, folder: Path, repo_id: str = "alice/sst2"):
    api.create_repo(repo_id, exist_ok=True)
    return api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message="push")


def test_whoami_names_the_user_and_a_bad_token_is_401(registry, hf, alice):
    me = _api(hf, registry, alice).whoami()
    assert me["name"] == "alice"
    assert me["auth"]["accessToken"]["role"] == "write"
    with pytest.raises(HfHubHTTPError) as e:
        _api(hf, registry, "hubr_not-a-token").whoami()
    assert e.value.response.status_code == 401


def test_pushed_bundle_downloads_byte_for_byte(registry, hf, alice, signing_key, tmp_path):
    bundle = signed_bundle(tmp_path / "b", signing_key)
    api = _api(hf, registry, alice)
    commit = push(api, bundle)

    info = api.model_info("alice/sst2")
    assert info.sha == commit.oid and len(info.sha) == 40
    assert sorted(s.rfilename for s in info.siblings) == BUNDLE_FILES
    assert api.list_repo_files("alice/sst2") == BUNDLE_FILES
    for revision in (None, "1.0.0", commit.oid):
        path = hf.hf_hub_download("alice/sst2", "adapter.safetensors", revision=revision,
                                  endpoint=registry.url, token=alice,
                                  cache_dir=tmp_path / f"cache-{revision}")
        assert Path(path).read_bytes() == (bundle / "adapter.safetensors").read_bytes()
    snapshot = Path(hf.snapshot_download("alice/sst2", endpoint=registry.url, token=alice,
                                         cache_dir=tmp_path / "snap"))
    for name in BUNDLE_FILES:
        assert (snapshot / name).read_bytes() == (bundle / name).read_bytes()


def test_resolve_answers_head_ranges_and_conditionals(registry, alice, signing_key, tmp_path,
                                                      hf):
    bundle = signed_bundle(tmp_path / "b", signing_key)
    commit = push(_api(hf, registry, alice), bundle)
    data = (bundle / "adapter.safetensors").read_bytes()
    url = f"{registry.url}/alice/sst2/resolve/main/adapter.safetensors"
    auth = {"Authorization": f"Bearer {alice}", "Accept-Encoding": "identity"}

    head = requests.head(url, headers=auth)
    assert head.status_code == 200
    assert head.headers["X-Repo-Commit"] == commit.oid
    assert head.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert head.headers["Content-Length"] == head.headers["X-Linked-Size"] == str(len(data))
    assert "X-Xet-Hash" not in head.headers and "xet" not in head.headers.get("Link", "")

    part = requests.get(url, headers={**auth, "Range": "bytes=100-"})
    assert part.status_code == 206
    assert part.headers["Content-Range"] == f"bytes 100-{len(data) - 1}/{len(data)}"
    assert part.content == data[100:]
    cached = requests.get(url, headers={**auth, "If-None-Match": head.headers["ETag"]})
    assert cached.status_code == 304


def test_missing_repo_revision_and_file_map_to_hub_errors(registry, hf, alice, signing_key,
                                                          tmp_path):
    commit = push(_api(hf, registry, alice), signed_bundle(tmp_path / "b", signing_key))
    kwargs = {"endpoint": registry.url, "token": alice, "cache_dir": tmp_path / "c"}
    with pytest.raises(RepositoryNotFoundError):
        hf.hf_hub_download("alice/nothing", "manifest.json", **kwargs)
    with pytest.raises(RevisionNotFoundError):
        hf.hf_hub_download("alice/sst2", "manifest.json", revision="9.9.9", **kwargs)
    with pytest.raises(EntryNotFoundError):
        hf.hf_hub_download("alice/sst2", "config.json", **kwargs)
    missing = requests.head(f"{registry.url}/alice/sst2/resolve/main/sub/config.json")
    assert missing.status_code == 404
    assert missing.headers["X-Error-Code"] == "EntryNotFound"
    assert missing.headers["X-Repo-Commit"] == commit.oid
    with pytest.raises(EntryNotFoundError):
        list(_api(hf, registry, alice).list_repo_tree("alice/sst2", path_in_repo="templates"))
    with pytest.raises(RepositoryNotFoundError):
        _api(hf, registry, alice).dataset_info("alice/sst2")


def test_transformers_finds_files_and_skips_optional_ones(registry, hf, alice, signing_key,
                                                          tmp_path, monkeypatch):
    push(_api(hf, registry, alice), signed_bundle(tmp_path / "b", signing_key))
    from transformers.utils import cached_file

    kwargs = {"cache_dir": tmp_path / "tf", "token": alice}
    monkeypatch.setattr(hf.constants, "ENDPOINT", registry.url)
    monkeypatch.setattr(hf.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        registry.url + "/{repo_id}/resolve/{revision}/{filename}")
    manifest = cached_file("alice/sst2", "manifest.json", **kwargs)
    assert Path(manifest).read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()
    assert cached_file("alice/sst2", "config.json", _raise_exceptions_for_missing_entries=False,
                       **kwargs) is None


def test_main_follows_the_newest_version_and_versions_are_tags(registry, hf, alice,
                                                               signing_key, tmp_path):
    api = _api(hf, registry, alice)
    commits = {v: push(api, signed_bundle(tmp_path / v, signing_key, version=v, seed=i)).oid
               for i, v in enumerate(["1.0.0", "2.0.0", "1.5.0", "2.1.0-rc.1"])}
    assert api.model_info("alice/sst2").sha == commits["2.0.0"]
    refs = api.list_repo_refs("alice/sst2")
    assert {t.name: t.target_commit for t in refs.tags} == commits
    assert [b.target_commit for b in refs.branches] == [commits["2.0.0"]]
    old = hf.hf_hub_download("alice/sst2", "manifest.json", revision="1.5.0",
                             endpoint=registry.url, token=alice, cache_dir=tmp_path / "c")
    assert '"version": "1.5.0"' in Path(old).read_text()


def test_a_version_is_immutable_and_a_replay_is_a_no_op(registry, hf, alice, signing_key,
                                                        tmp_path):
    api = _api(hf, registry, alice)
    first = push(api, signed_bundle(tmp_path / "a", signing_key, version="1.0.0"))
    with pytest.raises(HfHubHTTPError) as e:
        push(api, signed_bundle(tmp_path / "b", signing_key, version="1.0.0", seed=1))
    assert e.value.response.status_code == 409
    assert "version 1.0.0 of alice/sst2 exists with other content" in str(e.value)

    push(api, signed_bundle(tmp_path / "c", signing_key, version="2.0.0", seed=2))
    replay = push(api, tmp_path / "a")  # main is 2.0.0 now, so every file is sent again
    assert replay.oid == first.oid
    with registry.session() as session:
        assert sorted(session.scalars(select(Version.version))) == ["1.0.0", "2.0.0"]


def _commit_status(api, folder: Path) -> tuple[int, str]:
    with pytest.raises(HfHubHTTPError) as e:
        push(api, folder)
    return e.value.response.status_code, e.value.response.headers.get("X-Error-Code", "")


def test_pushes_that_break_the_policy_are_refused_and_leave_nothing(registry, hf, alice,
                                                                    signing_key, tmp_path):
    from factories import make_adapter_dir, refresh_files
    from hubcli.bundle import make_bundle

    api = _api(hf, registry, alice)
    unsigned = make_adapter_dir(tmp_path / "unsigned", name="sst2")
    make_bundle(unsigned)
    assert _commit_status(api, unsigned) == (422, "InvalidBundle")

    stranger = signed_bundle(tmp_path / "stranger", new_signing_key(tmp_path / "k"))
    status, code = _commit_status(api, stranger)
    assert (status, code) == (422, "InvalidSignature")

    tampered = signed_bundle(tmp_path / "tampered", signing_key)
    (tampered / "README.md").write_text("changed after signing\n")
    assert _commit_status(api, tampered) == (422, "InvalidBundle")  # digest != manifest
    refresh_files(tampered)  # now consistent, but not what was signed
    assert _commit_status(api, tampered) == (422, "InvalidSignature")

    renamed = signed_bundle(tmp_path / "other", signing_key, name="other-name")
    assert _commit_status(api, renamed) == (422, "InvalidBundle")

    pickled = signed_bundle(tmp_path / "pickled", signing_key)
    (pickled / "extra.pkl").write_bytes(b"\x80\x04K\x01.")
    status, _ = _commit_status(api, pickled)
    assert status == 422

    with registry.session() as session:
        assert session.scalars(select(Version)).all() == []
    assert not list((Path(registry.app.instance_path) / "blobs").rglob("*"))


def test_unregistered_key_message_says_how_to_register(registry, hf, alice, tmp_path):
    stranger = signed_bundle(tmp_path / "s", new_signing_key(tmp_path / "k"))
    with pytest.raises(HfHubHTTPError) as e:
        push(_api(hf, registry, alice), stranger)
    body = e.value.response.json()
    assert "POST /api/v1/keys" in body["hint"]


@pytest.fixture
def lfs_registry(registry_config):
    from conftest import start_registry

    reg, stop = start_registry({**registry_config, "LFS_UPLOADS": True, "LFS_MIN_SIZE": 1})
    yield reg
    stop()


def test_lfs_batch_path_when_xet_is_disabled(lfs_registry, hf, signing_key, tmp_path,
                                             monkeypatch):
    """A 2.x client with Xet off asks for LFS with X-Hub-Lfs (as `hub push` does); without
    the header it is answered "regular" (tests/registry/test_registry_large_uploads.py)."""
    registry = lfs_registry
    token = registry.user("alice", key=signing_key)
    monkeypatch.setattr(hf.constants, "HF_HUB_DISABLE_XET", True)
    bundle = signed_bundle(tmp_path / "b", signing_key)
    push(hf.HfApi(endpoint=registry.url, token=token, headers={"X-Hub-Lfs": "1"}), bundle)
    with registry.session() as session:
        uploaded = set(session.scalars(select(LfsUpload.oid)))
    assert hashlib.sha256((bundle / "adapter.safetensors").read_bytes()).hexdigest() in uploaded
    path = hf.hf_hub_download("alice/sst2", "adapter.safetensors", endpoint=registry.url,
                              token=token, cache_dir=tmp_path / "c")
    assert Path(path).read_bytes() == (bundle / "adapter.safetensors").read_bytes()


def test_lfs_upload_url_needs_its_signature_and_matching_bytes(lfs_registry, signing_key):
    registry = lfs_registry
    token = registry.user("alice", key=signing_key)
    auth = {"Authorization": f"Bearer {token}"}
    requests.post(f"{registry.url}/api/repos/create", json={"name": "sst2"}, headers=auth)
    data = b"weights" * 10
    oid = hashlib.sha256(data).hexdigest()
    batch = requests.post(f"{registry.url}/alice/sst2.git/info/lfs/objects/batch", headers=auth,
                          json={"operation": "upload", "objects": [{"oid": oid, "size": 70}]})
    href = batch.json()["objects"][0]["actions"]["upload"]["href"]
    assert requests.put(href.replace("signature=", "signature=0"), data=data).status_code == 403
    assert requests.put(href, data=b"x" * 70).status_code == 400
    assert requests.put(href, data=data).status_code == 200
    verify = requests.post(f"{registry.url}/alice/sst2.git/info/lfs/verify", headers=auth,
                           json={"oid": oid, "size": 70})
    assert verify.status_code == 200


def test_private_adapters_are_for_members_and_orgs_take_member_pushes(registry, hf, alice,
                                                                      signing_key, tmp_path):
    bob = registry.user("bob")
    registry.org("acme", "alice")
    api = _api(hf, registry, alice)
    api.create_repo("alice/secret", private=True)
    push(api, signed_bundle(tmp_path / "s", signing_key, name="secret"), "alice/secret")
    for token in (bob, None):
        with pytest.raises(RepositoryNotFoundError):
            hf.hf_hub_download("alice/secret", "manifest.json", endpoint=registry.url,
                               token=token or False, cache_dir=tmp_path / "c")
    assert _api(hf, registry, alice).model_info("alice/secret").private is True

    push(api, signed_bundle(tmp_path / "o", signing_key, name="shared"), "acme/shared")
    assert _api(hf, registry, bob).model_info("acme/shared").sha
    with pytest.raises(HfHubHTTPError) as e:
        _api(hf, registry, bob).create_repo("acme/bobs")
    assert e.value.response.status_code == 403


def test_downloads_of_the_weights_are_counted(registry, hf, alice, signing_key, tmp_path):
    push(_api(hf, registry, alice), signed_bundle(tmp_path / "b", signing_key))
    for i in range(2):
        hf.hf_hub_download("alice/sst2", "adapter.safetensors", endpoint=registry.url,
                           token=alice, cache_dir=tmp_path / f"c{i}")
    hf.hf_hub_download("alice/sst2", "manifest.json", endpoint=registry.url, token=alice,
                       cache_dir=tmp_path / "c0")
    requests.head(f"{registry.url}/alice/sst2/resolve/main/adapter.safetensors")
    assert _api(hf, registry, alice).model_info("alice/sst2").downloads == 2
    detail = requests.get(f"{registry.url}/api/v1/adapters/alice/sst2/versions/1.0.0").json()
    assert detail["downloads"] == 2


def test_yanked_versions_are_skipped_but_pinnable_with_a_warning(registry, hf, alice,
                                                                 signing_key, tmp_path):
    api = _api(hf, registry, alice)
    first = push(api, signed_bundle(tmp_path / "a", signing_key, version="1.0.0"))
    push(api, signed_bundle(tmp_path / "b", signing_key, version="1.1.0", seed=1))
    auth = {"Authorization": f"Bearer {alice}"}
    yank = requests.post(f"{registry.url}/api/v1/adapters/alice/sst2/versions/1.1.0/yank",
                         json={"reason": "wrong labels"}, headers=auth)
    assert yank.status_code == 200 and yank.json()["yanked"] is True

    assert api.model_info("alice/sst2").sha == first.oid
    pinned = requests.get(f"{registry.url}/alice/sst2/resolve/1.1.0/manifest.json")
    assert pinned.status_code == 200
    assert pinned.headers["X-Registry-Warning"] == ("alice/sst2 version 1.1.0 is yanked: "
                                                    "wrong labels")
    assert "X-Registry-Warning" not in requests.get(
        f"{registry.url}/alice/sst2/resolve/main/manifest.json").headers

    requests.post(f"{registry.url}/api/v1/adapters/alice/sst2/versions/1.0.0/yank",
                  json={"reason": "superseded"}, headers=auth)
    with pytest.raises(RevisionNotFoundError):
        hf.hf_hub_download("alice/sst2", "manifest.json", endpoint=registry.url, token=alice,
                           cache_dir=tmp_path / "c")
