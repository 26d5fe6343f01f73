"""hub pull against a real registry on localhost: download, verify, record; refuse and clean
up what does not verify; reuse what was pulled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import make_signed_bundle

from hubcli.remote import pull_records as pulled
from hubcli.remote import client as remote_api
from hubcli.cli.main import cli
from hubcli.errors import NotFoundError, RegistryError, TamperedError, UntrustedSignerError
from hubcli.remote.pull import describe_base, ensure_pulled, pull
from hubcli.settings import hub_home, load_config
from hubcli.signing.sign import create_signing_key


@pytest.fixture
def published(remote, registry_user, tmp_path):
    """Push sst2-adapter 1.0.0 (seed 1) and 1.1.0 signed by the user's registered key; returns
    a function making (and pushing) more versions."""
    create_signing_key(name=registry_user[0])
    remote_api.upload_own_key(remote)

    def publish(version: str, seed: int):
        bundle = make_signed_bundle(tmp_path / version / "sst2-adapter", name="sst2-adapter",
                                    version=version, seed=seed)
        return remote_api.push_bundle(remote, bundle), bundle

    publish("1.0.0", 1)
    publish("1.1.0", 2)
    return publish


def repo(registry_user) -> str:
    return f"{registry_user[0]}/sst2-adapter"


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def test_pull_verifies_records_and_becomes_last_pulled(remote, registry_user, published,
                                                       tmp_path):
    result = pull(repo(registry_user), remote)
    r = result.record
    assert (r.repo_id, r.version, r.source) == (repo(registry_user), "1.1.0", remote.endpoint)
    expected = hub_home() / "adapters" / remote.cache_key / repo(registry_user) / "1.1.0"
    assert Path(r.path) == expected.resolve()
    assert files_of(r.path) == files_of(tmp_path / "1.1.0" / "sst2-adapter")
    snapshot = (hub_home() / "hf-cache" / remote.cache_key /
                f"models--{registry_user[0]}--sst2-adapter" / "snapshots" / r.commit)
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(files_of(r.path))
    assert result.signer.startswith(f"{registry_user[0]} (sha256:")
    assert load_config()["last_pulled"] == f"{repo(registry_user)}@1.1.0"
    assert pulled.find(repo(registry_user), None) == r


def test_pull_at_version(remote, registry_user, published, tmp_path):
    result = pull(f"{repo(registry_user)}@1.0.0", remote)
    assert result.record.version == "1.0.0"
    assert files_of(result.record.path) == files_of(tmp_path / "1.0.0" / "sst2-adapter")
    assert load_config()["last_pulled"] == f"{repo(registry_user)}@1.0.0"


def test_tampered_download_is_refused_and_removed(remote, registry_user, published,
                                                  live_registry):
    _, bundle = published("2.0.0", 99)  # weights of its own: the blob is not shared
    manifest = json.loads((bundle / "manifest.json").read_text())
    sha = next(f["sha256"] for f in manifest["files"] if f["path"] == "adapter.safetensors")
    blob = live_registry.folder / "blobs" / sha[:2] / sha[2:4] / sha
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # same size, one bit flipped
    ref = f"{repo(registry_user)}@2.0.0"
    with pytest.raises(TamperedError) as e:
        pull(ref, remote)
    assert str(e.value).startswith(f"{ref} (downloaded): adapter.safetensors was modified "
                                   "after signing")
    adapters, cache = (hub_home() / folder / remote.cache_key for folder in ("adapters",
                                                                             "hf-cache"))
    assert not (adapters / repo(registry_user) / "2.0.0").exists()
    snapshots = cache / f"models--{registry_user[0]}--sst2-adapter" / "snapshots"
    assert list(snapshots.iterdir()) == []
    assert pulled.find(repo(registry_user), "2.0.0") is None
    assert "last_pulled" not in load_config()
    blob.write_bytes(good)  # the registry is repaired: the next pull fetches afresh
    assert pull(ref, remote).record.version == "2.0.0"


def test_registry_key_verifies_on_a_machine_that_does_not_trust_it(remote, registry_user,
                                                                    published, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "other-machine"))
    result = pull(repo(registry_user), remote)
    assert result.record.public_key is not None
    assert pulled.registry_keys_for(Path(result.record.path)) == [
        result.record.public_key.encode()]


def test_key_removed_from_registry_is_no_longer_trusted(remote, registry_user, published,
                                                        tmp_path, monkeypatch):
    from hubcli.signing.keys import key_id, public_key_path

    kid = key_id(public_key_path().read_bytes())
    remote_api.native(remote, "DELETE", f"keys/{kid}")
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "other-machine"))
    with pytest.raises(UntrustedSignerError):
        pull(repo(registry_user), remote)
    assert not (hub_home() / "adapters" / remote.cache_key / repo(registry_user) / "1.1.0").exists()
    assert pulled.load() == []


def test_ensure_pulled_reuses_without_network(remote, registry_user, published, monkeypatch):
    monkeypatch.setenv("HUB_ENDPOINT", remote.endpoint)
    monkeypatch.setenv("HUB_TOKEN", remote.token)
    notes: list[str] = []
    path = ensure_pulled(f"{repo(registry_user)}@1.0.0", notes.append)  # not here yet: pulls
    assert notes[-1] == f"pulled {repo(registry_user)}@1.0.0 into {path}"
    monkeypatch.setenv("HUB_ENDPOINT", "http://127.0.0.1:9")  # unreachable from now on
    assert ensure_pulled(f"{repo(registry_user)}@1.0.0", notes.append) == path
    assert ensure_pulled(repo(registry_user), notes.append) == path
    assert notes[-1] == (f"using {repo(registry_user)}@1.0.0, pulled before "
                         f"(`hub pull {repo(registry_user)}` for a newer one)")


def test_pull_unknown_repository_and_version(remote, registry_user, published):
    with pytest.raises(NotFoundError) as e:
        pull(f"{registry_user[0]}/nope", remote)
    assert str(e.value) == f"{registry_user[0]}/nope does not exist on {remote.endpoint}"
    with pytest.raises(NotFoundError) as e:
        pull(f"{repo(registry_user)}@9.9.9", remote)
    assert str(e.value) == f"{repo(registry_user)} has no version '9.9.9' on {remote.endpoint}"
    assert not (hub_home() / "adapters").exists()


def test_pull_of_a_yanked_version_warns(remote, registry_user, published):
    remote_api.native(remote, "POST", f"adapters/{repo(registry_user)}/versions/1.0.0/yank",
                      json={"reason": "wrong labels"})
    result = pull(f"{repo(registry_user)}@1.0.0", remote)
    assert result.warnings == (f"warning: {repo(registry_user)}@1.0.0 is yanked: wrong labels",)


def test_pull_cli(remote, registry_user, published):
    args = ["pull", f"{repo(registry_user)}@1.0.0", "--registry", remote.endpoint, "--token",
            remote.token]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    path = hub_home() / "adapters" / remote.cache_key / repo(registry_user) / "1.0.0"
    assert lines[0] == f"pulled {repo(registry_user)}@1.0.0 into {path.resolve()}"
    assert lines[1].startswith(f"  signed by {registry_user[0]} (sha256:")
    assert lines[2].startswith("  base tiny-bert (sha256:abababababab…) is not on this machine")
    assert lines[3] == f"next: hub predict {repo(registry_user)}@1.0.0 \"some text\""


def test_pull_from_hf_stand_in(remote, registry_user, published, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", remote.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["pull", repo(registry_user), "--from", "hf", "--json",
                                      "--quiet"])
    out = json.loads(result.stdout)
    assert (out["ref"], out["source"]) == (f"{repo(registry_user)}@1.1.0", remote.endpoint)
    assert out["key_id"].startswith("sha256:")


def test_describe_base():
    from hubcli.base.ref import packaged_base_hash

    base = {"name": "org/bert", "revision": "abc", "content_hash": "sha256:" + "12" * 32}
    assert describe_base({"base_model": base}) == (
        "base org/bert (sha256:121212121212…) is not on this machine; it will be downloaded "
        "from the Hugging Face Hub at revision abc when first used")
    assert describe_base({"base_model": {**base, "name": "/data/bert"}}).endswith(
        "pass --base FOLDER (a copy of it) when you use the adapter")
    assert describe_base({"base_model": {**base, "content_hash": packaged_base_hash()}}) \
        .startswith("base org/bert is on this machine (")


def test_untrusted_from_the_hub_needs_allow_unsigned(remote, registry_user, published,
                                                     tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    hub = remote_api.Remote(remote.endpoint, kind="hf", progress=False)  # the Hub: no keys API
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "other-machine"))
    with pytest.raises(RegistryError, match="huggingface_hub is in offline mode"):
        pull(repo(registry_user), hub)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(UntrustedSignerError) as e:
        pull(repo(registry_user), hub)
    assert e.value.hint.endswith("or pass --allow-unsigned to use it anyway")
    result = pull(repo(registry_user), hub, allow_unsigned=True)
    assert result.signer == "nobody you trust: NOT verified (--allow-unsigned)"
    assert (result.record.key_id, result.record.public_key) == (None, None)
