"""The commit endpoint at the protocol level: malformed payloads, odd names, limits, LFS
references, atomicity and concurrent pushes of one version."""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
import requests
from conftest import HEADER, bundle_ops, file_op, post_commit, signed_bundle, start_registry
from sqlalchemy import select

from registry_server import hf_commit
from registry_server.blobhttp import get_storage
from registry_server.models import Blob, Version
from registry_server.services import commits
from registry_server.services.maintenance import collect_garbage


@pytest.fixture
def alice(registry, signing_key) -> str:
    token = registry.user("alice", key=signing_key)
    created = requests.post(f"{registry.url}/api/repos/create", json={"name": "sst2"},
                            headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 200
    return token


@pytest.mark.parametrize("body, message", [
    (b"not json\n", "line 1: not valid JSON"),
    (b'{"key": "file", "value": {}}\n', "line 1: the header must come first"),
    (b'[1, 2]\n', 'line 1: expected {"key": ..., "value": {...}}'),
    (json.dumps(HEADER).encode() + b'\n{"key": "rename", "value": {}}\n',
     "line 2: unknown key 'rename'"),
    (json.dumps(HEADER).encode() + b'\n{"key": "file", "value": {"path": "a.json", '
     b'"content": "%%%", "encoding": "base64"}}\n', "line 2: a.json: content is not valid base64"),
    (json.dumps({"key": "header", "value": {"summary": "s", "parentCommit": "main"}}).encode(),
     "line 1: parentCommit must be a 40-hex commit id"),
    (b"", "the commit is empty"),
])
def test_malformed_payloads_are_400_with_the_line(registry, alice, body, message):
    answer = post_commit(registry, alice, body)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(message)
    assert answer.headers["X-Error-Code"] == "BadRequest"


@pytest.mark.parametrize("path", ["../manifest.json", "a/b.json", ".hidden", "/etc/passwd",
                                  "a\\b", "", "x" * 200, "README.md\n", 5])
def test_odd_or_traversing_paths_are_refused(registry, alice, path):
    answer = post_commit(registry, alice, [HEADER, file_op("ok.json", b"{}") | {
        "value": {"path": path, "content": "", "encoding": "base64"}}])
    assert answer.status_code == 400
    assert "is not allowed" in answer.json()["error"]


def test_a_path_given_twice_is_refused(registry, alice):
    answer = post_commit(registry, alice, [HEADER, file_op("README.md", b"a"),
                                           file_op("README.md", b"b")])
    assert answer.status_code == 400
    assert answer.json()["error"] == "line 3: README.md appears twice in the commit"


def test_commits_go_to_main_only(registry, alice, signing_key, tmp_path):
    answer = requests.post(f"{registry.url}/api/models/alice/sst2/commit/1.0.0", data=b"",
                           headers={"Authorization": f"Bearer {alice}"})
    assert answer.status_code == 400
    assert "commits go to main" in answer.json()["error"]


@pytest.fixture
def small_registry(registry_config, signing_key):
    reg, stop = start_registry({**registry_config, "MAX_FILE_SIZE": 4096,
                                "MAX_COMMIT_FILES": 3})
    token = reg.user("alice", key=signing_key)
    requests.post(f"{reg.url}/api/repos/create", json={"name": "sst2"},
                  headers={"Authorization": f"Bearer {token}"})
    yield reg, token
    stop()


def test_size_and_count_limits_answer_413(small_registry, signing_key, tmp_path):
    registry, token = small_registry
    big = post_commit(registry, token, [HEADER, file_op("adapter.safetensors", b"x" * 5000)])
    assert big.status_code == 413
    assert big.json()["error"] == ("line 2: adapter.safetensors is larger than 4096 bytes, the most "
                                   "allowed per file (MAX_FILE_SIZE)")
    many = post_commit(registry, token, [HEADER, *(file_op(f"f{i}.json", b"{}") for i in range(4))])
    assert many.status_code == 413
    assert many.json()["error"] == ("the commit sends more than 3 files, the most allowed "
                                    "(MAX_COMMIT_FILES)")
    deletions = [{"key": "deletedFile", "value": {"path": f"f{i}.json"}} for i in range(7)]
    flood = post_commit(registry, token, [HEADER, *deletions])
    assert flood.status_code == 413
    assert flood.json()["error"] == "the commit has more than 6 operations (twice MAX_COMMIT_FILES)"


def _chunked(lines: list[bytes]):
    """A body without Content-Length: requests sends a generator chunked."""
    yield from lines


def _streamed_file_line(path: str, size: int, piece: int = 1 << 20):
    """A `file` line for `size` bytes of b"x", produced piece by piece (never whole)."""
    yield b'{"key": "file", "value": {"content": "'
    quads, left = base64.b64encode(b"x" * 3 * (piece // 3)), size
    while left >= 3 * (piece // 3):
        yield quads
        left -= 3 * (piece // 3)
    yield base64.b64encode(b"x" * left)
    yield f'", "path": "{path}", "encoding": "base64"}}}}\n'.encode()


@pytest.fixture
def mib_registry(registry_config, signing_key):
    reg, stop = start_registry({**registry_config, "MAX_FILE_SIZE": 2 << 20,
                                "MAX_BUNDLE_SIZE": 3 << 20, "MAX_COMMIT_FILES": 4})
    token = reg.user("alice", key=signing_key)
    requests.post(f"{reg.url}/api/repos/create", json={"name": "sst2"},
                  headers={"Authorization": f"Bearer {token}"})
    yield reg, token
    stop()


def _staging(registry) -> list:
    return sorted(p.name for p in (Path(registry.app.instance_path) / "tmp").iterdir())


@pytest.mark.parametrize("files, message", [
    # One file over MAX_FILE_SIZE, sent chunked: no Content-Length guard can catch it.
    ([("adapter.safetensors", 40 << 20)],
     "line 2: the inline file is larger than 2097152 bytes, the most allowed per file "
     "(MAX_FILE_SIZE)"),
    # Two files under MAX_FILE_SIZE, over MAX_BUNDLE_SIZE together.
    ([("a.json", 2 << 20), ("b.json", 2 << 20)],
     "line 3: the commit's files are larger than 3145728 bytes together, the most allowed "
     "(MAX_BUNDLE_SIZE)"),
])
def test_chunked_pushes_are_refused_while_reading(mib_registry, files, message):
    registry, token = mib_registry
    body = [json.dumps(HEADER).encode() + b"\n"] + [
        part for path, size in files for part in _streamed_file_line(path, size)]
    answer = requests.post(f"{registry.url}/api/models/alice/sst2/commit/main",
                           data=_chunked(body), headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 413
    assert answer.json()["error"] == message
    assert _staging(registry) == []


def test_a_file_line_longer_than_any_buffer_is_streamed_and_committed(registry, alice,
                                                                     signing_key, tmp_path):
    bundle = signed_bundle(tmp_path / "b", signing_key, hidden=256, bottleneck=64)
    weights = (bundle / "adapter.safetensors").read_bytes()
    assert len(weights) > 4 * hf_commit.MAX_LINE_REST  # streamed, not parsed whole
    content = base64.b64encode(weights).decode()
    # The content first and the path last, as a client may order the keys.
    line = ('{"key": "file", "value": {"content": "' + content
            + '", "encoding": "base64", "path": "adapter.safetensors"}}')
    others = [op for op in bundle_ops(bundle) if op["value"]["path"] != "adapter.safetensors"]
    body = b"".join(json.dumps(op).encode() + b"\n" for op in [HEADER, *others])
    answer = post_commit(registry, alice, body + line.encode() + b"\n")
    assert answer.status_code == 200, answer.text
    got = requests.get(f"{registry.url}/alice/sst2/resolve/main/adapter.safetensors")
    assert hashlib.sha256(got.content).digest() == hashlib.sha256(weights).digest()


@pytest.mark.parametrize("tail, message", [
    (b'", "path": "a.json"}, "key": "lfsFile"}\n',
     "line 2: only a 'file' operation's content may be this long"),
    (b"%%%%", "line 2: the inline file: content is not valid base64"),
    (b'", "path": "a.json", "x": "' + b"y" * (70 * 1024) + b'"}}\n',
     "line 2: more than 65536 bytes outside a file's content"),
])
def test_malformed_streamed_lines_are_400(registry, alice, tail, message):
    body = (json.dumps(HEADER).encode() + b'\n{"value": {"content": "'
            + base64.b64encode(b"z" * (100 * 1024)) + tail)
    answer = post_commit(registry, alice, body)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(message)
    assert _staging(registry) == []


def test_a_deeply_nested_commit_line_is_400(registry, alice):
    answer = post_commit(registry, alice, json.dumps(HEADER).encode() + b"\n"
                         + b'{"key": "file", "value": ' + b"[" * 20_000 + b"]" * 20_000 + b"}\n")
    assert answer.status_code == 400
    assert answer.json()["error"] == "line 2: not valid JSON (nested deeper than 64 levels)"


def test_a_commit_cannot_reference_another_adapters_blob_by_hash(registry, alice, signing_key,
                                                                 tmp_path):
    bundle = signed_bundle(tmp_path / "b", signing_key)
    assert post_commit(registry, alice, [HEADER, *bundle_ops(bundle)]).status_code == 200
    mallory = registry.user("mallory")
    requests.post(f"{registry.url}/api/repos/create", json={"name": "sst2"},
                  headers={"Authorization": f"Bearer {mallory}"})
    weights = (bundle / "adapter.safetensors").read_bytes()
    steal = {"key": "lfsFile", "value": {"path": "adapter.safetensors", "algo": "sha256",
                                         "oid": hashlib.sha256(weights).hexdigest(),
                                         "size": len(weights)}}
    answer = post_commit(registry, mallory, [HEADER, steal], repo="mallory/sst2")
    assert answer.status_code == 400
    assert "was not uploaded to mallory/sst2" in answer.json()["error"]


def test_only_changed_files_need_sending_for_a_new_version(registry, alice, signing_key,
                                                           tmp_path):
    first = signed_bundle(tmp_path / "a", signing_key, version="1.0.0")
    assert post_commit(registry, alice, [HEADER, *bundle_ops(first)]).status_code == 200
    second = signed_bundle(tmp_path / "b", signing_key, version="1.1.0")
    changed = [op for op in bundle_ops(second)
               if (first / op["value"]["path"]).read_bytes()
               != (second / op["value"]["path"]).read_bytes()]
    assert len(changed) < 4  # the weights are the same (same seed)
    answer = post_commit(registry, alice, [HEADER, *changed])
    assert answer.status_code == 200 and answer.json()["version"] == "1.1.0"


def test_an_interrupted_commit_leaves_no_version_and_gc_removes_its_blobs(
        registry, alice, signing_key, tmp_path, monkeypatch):
    bundle = signed_bundle(tmp_path / "b", signing_key)

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    monkeypatch.setattr(commits, "_insert_blobs", crash)
    answer = post_commit(registry, alice, [HEADER, *bundle_ops(bundle)])
    assert answer.status_code == 500
    assert answer.json() == {"error": "internal server error", "code": "InternalError"}
    storage = get_storage(registry.app)
    with registry.session() as session:
        assert session.scalars(select(Version)).all() == []
        assert session.scalars(select(Blob)).all() == []
        assert len(list(storage.digests())) == 4  # stored, but referenced by nothing
        assert len(collect_garbage(session, storage, grace_hours=0)) == 4
    assert list(storage.digests()) == []

    monkeypatch.undo()
    assert post_commit(registry, alice, [HEADER, *bundle_ops(bundle)]).status_code == 200


def test_concurrent_pushes_of_one_version_one_wins_one_conflicts(registry, alice, signing_key,
                                                                 tmp_path):
    bodies = [[HEADER, *bundle_ops(signed_bundle(tmp_path / str(i), signing_key, seed=i))]
              for i in range(2)]
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def push(body):
        barrier.wait()
        statuses.append(post_commit(registry, alice, body).status_code)

    threads = [threading.Thread(target=push, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 409]
    with registry.session() as session:
        assert len(session.scalars(select(Version)).all()) == 1


@pytest.mark.parametrize("code, status, message", [
    (errno.ENOSPC, 507, "the registry's storage is full; nothing was changed"),
    (errno.EROFS, 503, "the registry's storage is read-only; nothing was changed"),
])
def test_a_full_or_read_only_storage_is_a_clear_answer_and_recovers(
        registry, alice, signing_key, tmp_path, monkeypatch, code, status, message):
    bundle = signed_bundle(tmp_path / "b", signing_key)

    def no_room(self, sha256, source):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(type(get_storage(registry.app)), "put", no_room)
    answer = post_commit(registry, alice, [HEADER, *bundle_ops(bundle)])
    assert answer.status_code == status
    assert answer.json()["error"] == message
    with registry.session() as session:
        assert session.scalars(select(Version)).all() == []
    monkeypatch.undo()  # room again: no restart needed
    assert post_commit(registry, alice, [HEADER, *bundle_ops(bundle)]).status_code == 200


def test_build_metadata_is_refused(registry, alice, signing_key, tmp_path):
    bundle = signed_bundle(tmp_path / "b", signing_key, version="1.0.0+build.1")
    answer = post_commit(registry, alice, [HEADER, *bundle_ops(bundle)])
    assert answer.status_code == 422
    assert answer.json()["error"] == ("manifest.json field 'version' '1.0.0+build.1' has build "
                                      "metadata, which this registry does not accept")
