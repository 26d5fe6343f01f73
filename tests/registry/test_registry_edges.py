"""Input that one database accepts and another refuses, or that breaks a parser or a header, is
answered alike on SQLite and PostgreSQL: a 4xx naming the field, never a 500."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import requests
from conftest import HEADER, bundle_ops, post_commit, signed_bundle
from factories import make_adapter_dir

from hubcli.bundle import make_bundle
from hubcli.signing.sign import sign_bundle

NESTED = "[" * 5000 + "]" * 5000


@pytest.fixture
def alice(registry, signing_key) -> str:
    token = registry.user("alice", key=signing_key)
    requests.post(f"{registry.url}/api/repos/create", json={"name": "sst2"},
                  headers={"Authorization": f"Bearer {token}"})
    return token


def _error(answer, status: int) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    return answer.json()["error"]


def test_control_characters_are_escaped_in_every_header(registry):
    answer = requests.get(f"{registry.url}/api/v1/adapters/a%01b/x%7f\u00e9")
    assert _error(answer, 401) == "repository a\x01b/x\x7f\u00e9 not found"
    assert answer.headers["X-Error-Message"] == "repository a\\x01b/x\\x7f\\xe9 not found"
    assert all(value.isascii() and value.isprintable() for value in answer.headers.values())


@pytest.mark.parametrize("path, message", [
    ("/api/v1/adapters/a%00b/x", "the URL path contains a NUL character"),
    ("/api/v1/adapters?q=a%00", "query parameter 'q' contains a NUL character"),
    ("/api/v1/adapters?page=99999999999999999999",
     "query parameter 'page' must be from 1 to 1000000, not 99999999999999999999"),
    ("/api/v1/adapters?page=0", "query parameter 'page' must be from 1 to 1000000, not 0"),
    ("/api/v1/adapters?per_page=101", "query parameter 'per_page' must be from 1 to 100, not 101"),
    ("/api/v1/adapters?task=AAA",
     "query parameter 'task' must be one of classification, regression, tagging, qa, not 'AAA'"),
])
def test_bad_urls_are_400_naming_the_parameter(registry, path, message):
    assert _error(requests.get(registry.url + path), 400) == message


def test_an_id_no_database_can_hold_is_a_404(registry, alice):
    answer = requests.delete(f"{registry.url}/api/v1/tokens/99999999999999999999999",
                             headers={"Authorization": f"Bearer {alice}"})
    assert _error(answer, 404).startswith("The requested URL was not found")


@pytest.mark.parametrize("path, body, message", [
    ("/api/validate-yaml", {"content": "a\u0000b"}, "field 'content' contains a NUL character"),
    ("/api/v1/tokens", {"name": "ok", "x": [{"y": "\u0000"}]},
     "field 'x[0].y' contains a NUL character"),
    ("/api/repos/create", {"name": "n\u0000"}, "field 'name' contains a NUL character"),
    ("/api/v1/keys", {"pem": "\u0000"}, "field 'pem' contains a NUL character"),
    ("/api/v1/tokens", {"name": None}, "field 'name' must be of type str, not null"),
])
def test_nul_characters_in_json_bodies_are_400(registry, alice, path, body, message):
    answer = requests.post(registry.url + path, json=body,
                           headers={"Authorization": f"Bearer {alice}"})
    assert _error(answer, 400) == message


@pytest.mark.parametrize("path", ["/api/validate-yaml", "/api/v1/tokens",
                                  "/alice/sst2.git/info/lfs/objects/batch"])
def test_deeply_nested_json_bodies_are_400(registry, alice, path):
    answer = requests.post(registry.url + path, data=NESTED,
                           headers={"Authorization": f"Bearer {alice}",
                                    "Content-Type": "application/json"})
    assert _error(answer, 400) == ("the request body is not valid JSON (nested deeper than 64 "
                                   "levels)")


@pytest.mark.parametrize("overrides, message", [
    ({"description": "a\u0000b"}, "manifest.json field 'description' contains a NUL character"),
    ({"version": "1.0.0-" + "a" * 60},
     "manifest.json field 'version' has 66 characters; at most 64 are allowed"),
    ({"base_model": {"name": "b" * 300}},
     "manifest.json field 'base_model.name' has 300 characters; at most 256 are allowed"),
])
def test_manifest_values_no_column_can_hold_are_422(registry, alice, signing_key, tmp_path,
                                                     overrides, message):
    bundle = signed_bundle(tmp_path / "b", signing_key, **overrides)
    answer = post_commit(registry, alice, [HEADER, *bundle_ops(bundle)])
    assert _error(answer, 422) == message


def test_a_model_card_with_a_nul_is_422(registry, alice, signing_key, tmp_path):
    bundle = make_adapter_dir(tmp_path / "b", name="sst2")
    make_bundle(bundle)
    card = b"# Card\n\0\n"
    (bundle / "README.md").write_bytes(card)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "README.md":
            entry.update(sha256=hashlib.sha256(card).hexdigest(), size=len(card))
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    sign_bundle(bundle, signing_key.private_path)
    answer = post_commit(registry, alice, [HEADER, *bundle_ops(bundle)])
    assert _error(answer, 422) == "README.md contains a NUL character"


def test_a_deeply_nested_weights_header_or_signature_is_422(registry, alice, signing_key,
                                                             tmp_path):
    bundle = signed_bundle(tmp_path / "b", signing_key)
    header = NESTED.encode()
    ops = bundle_ops(bundle)
    bad_sig = [op if op["value"]["path"] != "model.sig" else
               {**op, "value": {**op["value"], "content": _b64(header)}} for op in ops]
    answer = post_commit(registry, alice, [HEADER, *bad_sig])
    assert "model.sig: not a Sigstore bundle (ValueError)" in _error(answer, 422)
    weights = len(header).to_bytes(8, "little") + header
    bad_weights = [op if op["value"]["path"] != "adapter.safetensors" else
                   {**op, "value": {**op["value"], "content": _b64(weights)}} for op in ops]
    answer = post_commit(registry, alice, [HEADER, *bad_weights])
    assert _error(answer, 422).startswith("adapter.safetensors")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
