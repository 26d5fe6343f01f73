"""Blob storage on local disk and on an S3-compatible server (moto in server mode, real HTTP)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from conftest import signed_bundle, start_registry
from flask import Flask

from registry_server.blobhttp import blob_response
from registry_server.models import Adapter
from sqlalchemy import select
from registry_server.storage import DiskStorage, S3Storage, make_storage

DATA = bytes(range(256)) * 40
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(params=["disk", "s3"])
def storage(request, tmp_path):
    if request.param == "disk":
        return DiskStorage(tmp_path / "blobs")
    bucket = request.getfixturevalue("bucket")
    return make_storage(f"s3://{bucket}/registry", s3_endpoint_url=request.getfixturevalue(
        "s3_endpoint"))


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "upload"
    path.write_bytes(DATA)
    return path


def test_put_is_idempotent_and_content_addressed(storage, source, tmp_path):
    assert not storage.exists(SHA)
    storage.put(SHA, source)
    storage.put(SHA, source)
    assert storage.exists(SHA)
    assert [sha for sha, _ in storage.digests()] == [SHA]
    storage.copy_to(SHA, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == DATA
    storage.delete(SHA)
    assert not storage.exists(SHA)
    with pytest.raises(FileNotFoundError):
        storage.copy_to(SHA, tmp_path / "missing")


def test_disk_writes_leave_no_temp_files(tmp_path, source):
    storage = DiskStorage(tmp_path / "blobs")
    storage.put(SHA, source)
    files = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert files == [tmp_path / "blobs" / SHA[:2] / SHA[2:4] / SHA]


def test_s3_keys_live_under_the_prefix(bucket, s3_endpoint, source):
    storage = make_storage(f"s3://{bucket}/some/prefix", s3_endpoint_url=s3_endpoint)
    assert isinstance(storage, S3Storage)
    storage.put(SHA, source)
    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_endpoint)
            .list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == [f"some/prefix/{SHA[:2]}/{SHA[2:4]}/{SHA}"]


def _client(storage):
    app = Flask(__name__)
    app.add_url_rule("/blob", "blob", lambda: blob_response(storage, SHA, len(DATA)),
                     methods=["GET", "HEAD"])
    return app.test_client()


@pytest.mark.parametrize("method, headers, status, body", [
    ("GET", {}, 200, DATA),
    ("HEAD", {}, 200, b""),
    ("GET", {"Range": "bytes=10-19"}, 206, DATA[10:20]),
    ("GET", {"Range": "bytes=10000-"}, 206, DATA[10000:]),
    ("GET", {"If-None-Match": f'"{SHA}"'}, 304, b""),
])
def test_responses_serve_ranges_heads_and_conditionals(storage, source, method, headers, status,
                                                       body):
    storage.put(SHA, source)
    response = _client(storage).open("/blob", method=method, headers=headers)
    assert response.status_code == status
    assert response.get_data() == body
    assert response.headers["ETag"] == f'"{SHA}"'
    if status != 304:
        expected = len(body) if method == "GET" else len(DATA)
        assert response.headers["Content-Length"] == str(expected)
    if status == 206:
        assert response.headers["Content-Range"].endswith(f"/{len(DATA)}")


def test_unsatisfiable_range_is_416(storage, source):
    storage.put(SHA, source)
    response = _client(storage).get("/blob", headers={"Range": "bytes=99999-"})
    assert response.status_code == 416


def test_make_storage_refuses_an_s3_url_without_bucket():
    with pytest.raises(ValueError, match="names no bucket"):
        make_storage("s3:///prefix")


def test_disk_storage_serves_directly_even_when_redirects_are_on(tmp_path, source):
    storage = DiskStorage(tmp_path / "blobs")
    storage.put(SHA, source)
    app = Flask(__name__)
    app.add_url_rule("/blob", "blob", lambda: blob_response(storage, SHA, len(DATA),
                                                            redirect_ttl=300))
    response = app.test_client().get("/blob")
    assert (response.status_code, response.get_data()) == (200, DATA)


@pytest.mark.parametrize("ttl", [300, 0])
def test_registry_pushes_to_s3_and_downloads_redirect_to_presigned_urls(
        bucket, s3_endpoint, tmp_path, signing_key, monkeypatch, ttl):
    import huggingface_hub
    import huggingface_hub.constants as constants
    import requests

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    registry, stop = start_registry({
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'registry.db'}", "DOWNLOAD_FLUSH_SECONDS": 0,
        "STORAGE": f"s3://{bucket}/registry", "S3_ENDPOINT_URL": s3_endpoint,
        "DOWNLOAD_URL_TTL": ttl})
    try:
        token = registry.user("alice", key=signing_key)
        api = huggingface_hub.HfApi(endpoint=registry.url, token=token)
        api.create_repo("alice/sst2")
        bundle = signed_bundle(tmp_path / "b", signing_key)
        api.upload_folder(folder_path=bundle, repo_id="alice/sst2")
        path = huggingface_hub.hf_hub_download("alice/sst2", "adapter.safetensors",
                                               endpoint=registry.url, token=token,
                                               cache_dir=tmp_path / "cache")
        assert Path(path).read_bytes() == (bundle / "adapter.safetensors").read_bytes()
        listed = boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=bucket)
        assert len(listed["Contents"]) == 4
        weights = (bundle / "adapter.safetensors").read_bytes()
        url = f"{registry.url}/alice/sst2/resolve/main/adapter.safetensors"
        auth = {"Authorization": f"Bearer {token}"}
        head = requests.head(url, headers=auth)  # metadata still comes from the registry
        assert head.status_code == 200 and head.headers["X-Linked-Size"] == str(len(weights))
        answer = requests.get(url, headers=auth, allow_redirects=False)
        if ttl:
            assert answer.status_code == 302
            location = answer.headers["Location"]
            assert location.startswith(f"{s3_endpoint}/{bucket}/registry/")
            expires = int(parse_qs(urlparse(location).query)["Expires"][0])
            assert time.time() < expires <= time.time() + ttl + 1  # short-lived
            assert answer.headers["X-Repo-Commit"] == head.headers["X-Repo-Commit"]
            assert requests.get(location).content == weights  # no token needed: the URL is one
            ranged = requests.get(url, headers={**auth, "Range": "bytes=10-19"})
            assert (ranged.status_code, ranged.content) == (206, weights[10:20])
        else:
            assert (answer.status_code, answer.content) == (200, weights)
        with registry.session() as session:
            # the client's download and the plain GET, not the resume
            assert session.scalar(select(Adapter.downloads)) == 2
    finally:
        stop()
