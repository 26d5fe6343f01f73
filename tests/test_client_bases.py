"""Base models on the registry from the client: `hub push --base` publishes a base folder,
and `hub pull` of an adapter whose base is not on this machine finds the base on the registry
by its content hash, downloads it and checks it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import make_signed_bundle

from hubcli.base.hashing import content_hash
from hubcli.base.ref import find_base
from hubcli.cli.main import cli
from hubcli.errors import ModelError
from hubcli.format.base_identity import folder_tokenizer_hash
from hubcli.remote import client as remote_api
from hubcli.remote.bases import push_base
from hubcli.remote.pull import pull
from hubcli.signing.sign import create_signing_key


def _push_cli(remote, *args: str):
    return CliRunner().invoke(cli, ["push", *args, "--registry", remote.endpoint, "--token",
                                    remote.token, "--quiet", "--json"])


def test_hub_push_base_publishes_a_base_folder(remote, registry_user, tiny_base_dir):
    result = _push_cli(remote, "--base", str(tiny_base_dir), "--repo",
                       f"{registry_user[0]}/tiny-bert")
    assert result.exit_code == 0, result.output
    first = json.loads(result.output)
    assert (first["repo_id"], first["version"], first["created"]) == \
        (f"{registry_user[0]}/tiny-bert", "1.0.0", True)
    assert "model.safetensors" in first["files"]
    again = json.loads(_push_cli(remote, "--base", str(tiny_base_dir), "--repo",
                                 f"{registry_user[0]}/tiny-bert").output)
    assert (again["commit"], again["created"]) == (first["commit"], False)
    hosted = remote_api.native(remote, "GET", f"bases/{content_hash(tiny_base_dir)}")
    assert (hosted["id"], hosted["commit"]) == (first["repo_id"], first["commit"])


def test_hub_push_base_refuses_pickles_before_uploading(remote, tiny_base_dir, tmp_path):
    folder = tmp_path / "base"
    shutil.copytree(tiny_base_dir, folder)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04")
    result = _push_cli(remote, "--base", str(folder))
    assert result.exit_code != 0
    assert "pytorch_model.bin: pickle-based weights are not allowed" in result.output


@pytest.fixture
def adapter_on_hosted_base(remote, registry_user, tiny_base_dir, tmp_path):
    """The tiny base pushed as a base, and an adapter trained on it (by its hashes)."""
    create_signing_key(name=registry_user[0])
    remote_api.upload_own_key(remote)
    push_base(remote, tiny_base_dir, repo_id=f"{registry_user[0]}/tiny-bert")
    digest = content_hash(tiny_base_dir)
    bundle = make_signed_bundle(
        tmp_path / "sst2-adapter", name="sst2-adapter",
        base_model={"name": "tiny-bert", "content_hash": digest,
                    "tokenizer_hash": folder_tokenizer_hash(tiny_base_dir)})
    remote_api.push_bundle(remote, bundle)
    return f"{registry_user[0]}/sst2-adapter", digest


def test_pull_fetches_the_missing_base_by_its_hash(remote, adapter_on_hosted_base,
                                                   tiny_base_dir):
    ref, digest = adapter_on_hosted_base
    assert find_base(digest) is None  # a fresh HUB_HOME: this machine has no copy
    notes: list[str] = []
    result = pull(ref, remote, notify=notes.append)
    local = find_base(digest)
    assert local is not None and content_hash(Path(local)) == digest
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (Path(local) / name).read_bytes() == (tiny_base_dir / name).read_bytes()
    assert any(n.startswith("downloading base ") and "tiny-bert@1.0.0" in n for n in notes)
    assert result.base == f"base tiny-bert is on this machine ({local})"


def test_a_base_that_does_not_hash_as_recorded_is_refused_and_removed(
        remote, adapter_on_hosted_base, live_registry, tiny_base_dir):
    ref, digest = adapter_on_hosted_base
    from hubcli.fsutil import sha256_file

    sha = sha256_file(tiny_base_dir / "model.safetensors")
    blob = live_registry.folder / "blobs" / sha[:2] / sha[2:4] / sha
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # a bit flipped in the last tensor
    try:
        with pytest.raises(ModelError, match="does not match the adapter's base"):
            pull(ref, remote)
    finally:
        blob.write_bytes(good)
    assert find_base(digest) is None
