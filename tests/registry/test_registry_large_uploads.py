"""Large uploads with the stock huggingface_hub client and LFS_UPLOADS on: 2.x (hf_xet
installed, so "lfs" files would go to Xet) is answered "regular" and uploads inline; a client
older than 1.20 does plain Git LFS with no special header; a 200 MB base uploads, with the
installed client and with each of HUB_CLIENT_PYTHONS (interpreters with other huggingface_hub
versions, which .ci/run makes: 0.36 and 1.21)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests
from conftest import start_registry
from safetensors.numpy import save_file
from sqlalchemy import select

from hubcli.base.hashing import content_hash
from registry_server.models import LfsUpload

OTHER_CLIENTS = os.environ.get("HUB_CLIENT_PYTHONS", "").split()


@pytest.fixture
def registry_config(registry_config) -> dict:
    return {**registry_config, "LFS_UPLOADS": True, "LFS_MIN_SIZE": 1024}


@pytest.fixture
def alice(registry) -> str:
    return registry.user("alice")


def _base(folder: Path, values: int) -> Path:
    """A base folder whose one tensor holds `values` float32 numbers."""
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    save_file({"w": np.ones(values, dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


def _push(hf, registry, token, folder: Path, repo_id: str = "alice/base"):
    api = hf.HfApi(endpoint=registry.url, token=token)
    api.create_repo(repo_id, exist_ok=True)
    return api.upload_folder(folder_path=folder, repo_id=repo_id)


def _lfs_oids(registry) -> set[str]:
    with registry.session() as session:
        return set(session.scalars(select(LfsUpload.oid)))


def test_a_2x_client_with_hf_xet_uploads_inline_instead_of_asking_for_xet(registry, hf, alice,
                                                                          tmp_path):
    folder = _base(tmp_path / "b", 4096)
    commit = _push(hf, registry, alice, folder)  # was: 501 XetUnsupported from xet-write-token
    assert len(commit.oid) == 40
    assert _lfs_oids(registry) == set()


def test_a_client_without_xet_uses_plain_lfs_with_no_special_header(registry, hf, alice,
                                                                     tmp_path, monkeypatch):
    from huggingface_hub.utils import _headers

    # What huggingface_hub 1.19 sends: its version in the user agent, and no Xet upload path.
    monkeypatch.setattr(_headers, "get_hf_hub_version", lambda: "1.19.0")
    monkeypatch.setattr(hf.constants, "HF_HUB_DISABLE_XET", True)
    folder = _base(tmp_path / "b", 4096)
    _push(hf, registry, alice, folder)
    sha = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert _lfs_oids(registry) == {sha}  # the weights went through the LFS batch API
    head = requests.head(f"{registry.url}/alice/base/resolve/main/model.safetensors")
    assert head.headers["ETag"] == f'"{sha}"'


def test_a_200_mb_base_uploads_with_the_installed_client(hf, tmp_path):
    """On SQLite only: the database does nothing size-dependent (about 15 s here)."""
    registry, stop = start_registry({
        "INSTANCE_PATH": str(tmp_path / "instance"), "SECRET_KEY": "test-secret",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'registry.db'}", "LFS_UPLOADS": True})
    try:
        folder = _base(tmp_path / "big", 50_000_000)  # 200 MB of float32
        size = (folder / "model.safetensors").stat().st_size
        assert size > 200_000_000
        _push(hf, registry, registry.user("alice"), folder, "alice/big")
        hosted = requests.get(f"{registry.url}/api/v1/bases/{content_hash(folder)}").json()
        assert hosted["id"] == "alice/big"
        assert [f["size"] for f in hosted["files"] if f["path"] == "model.safetensors"] == [size]
    finally:
        stop()


def _upload_script() -> str:
    """The child script benchmarks/bench_client_versions.py runs with each client."""
    path = Path(__file__).parents[2] / "benchmarks" / "bench_client_versions.py"
    spec = importlib.util.spec_from_file_location("bench_client_versions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CHILD


@pytest.mark.parametrize("python", OTHER_CLIENTS)
def test_a_200_mb_base_uploads_with_another_client_version(python, tmp_path):
    """0.36 (before Xet) takes plain Git LFS; 1.21 (Xet-minded, hf_xet installed) inline."""
    registry, stop = start_registry({
        "INSTANCE_PATH": str(tmp_path / "instance"), "SECRET_KEY": "test-secret",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'registry.db'}", "LFS_UPLOADS": True})
    try:
        folder = tmp_path / "big"
        out = subprocess.run(
            [python, "-c", _upload_script(), registry.url, registry.user("alice"), "alice/big",
             str(folder), str(50_000_000)], capture_output=True, text=True, timeout=600,
            env={**os.environ, "HF_ENDPOINT": registry.url, "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                 "HF_HUB_OFFLINE": "0"})
        assert out.returncode == 0, out.stderr[-2000:]
        version = json.loads(out.stdout.strip().splitlines()[-1])["version"]
        hosted = requests.get(f"{registry.url}/api/v1/bases/{content_hash(folder)}").json()
        assert hosted["id"] == "alice/big"
        sha = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        assert (_lfs_oids(registry) == {sha}) == (tuple(map(int, version.split(".")[:2])) < (1, 20))
    finally:
        stop()
