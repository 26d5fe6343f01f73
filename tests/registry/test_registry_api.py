"""The native JSON API (/api/v1): search, details, versions, yank/delete, keys, tokens, errors,
and the OpenAPI document."""

from __future__ import annotations

import hashlib
import logging
import re

import pytest
import requests
from conftest import HEADER, bundle_ops, new_signing_key, post_commit, signed_bundle
from cryptography.hazmat.primitives import serialization
from openapi_spec_validator import validate
from hubcli.signing.keys import sign_challenge
from sqlalchemy import select

from registry_server.models import Token

BASE_A = "sha256:" + "a1" * 32
BASE_B = "sha256:" + "b2" * 32


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def publish(registry, token: str, folder, repo: str, *, private: bool = False) -> None:
    ns, name = repo.split("/")
    requests.post(f"{registry.url}/api/repos/create", headers=auth(token),
                  json={"name": name, "organization": ns, "private": private})
    answer = post_commit(registry, token, [HEADER, *bundle_ops(folder)], repo=repo)
    assert answer.status_code == 200, answer.text


@pytest.fixture
def catalogue(registry, signing_key, tmp_path):
    """alice's adapters: sentiment (2 versions), ner, private secret; bob's news."""
    alice = registry.user("alice", key=signing_key)
    bob_key = new_signing_key(tmp_path / "bob")  # a key belongs to one account
    bob = registry.user("bob", key=bob_key)

    def bundle(name, version="1.0.0", key=signing_key, **kw):
        return signed_bundle(tmp_path / f"{name}-{version}", key, name=name,
                             version=version, **kw)

    publish(registry, alice, bundle("sentiment", description="Movie review polarity",
                                    tags=["sentiment", "english"],
                                    base_model={"content_hash": BASE_A}), "alice/sentiment")
    publish(registry, alice, bundle("sentiment", "1.1.0", seed=1, tags=["sentiment", "english"],
                                    description="Movie review polarity, retrained",
                                    base_model={"content_hash": BASE_A}), "alice/sentiment")
    publish(registry, alice, bundle("ner", task="tagging", tags=["english"],
                                    head={"type": "token_classification", "num_outputs": 3,
                                          "labels": ["O", "B-PER", "I-PER"]},
                                    base_model={"content_hash": BASE_B}), "alice/ner")
    publish(registry, alice, bundle("secret", base_model={"content_hash": BASE_A}),
            "alice/secret", private=True)
    publish(registry, bob, bundle("news", key=bob_key, description="News topics",
                                  tags=["news"],
                                  base_model={"content_hash": BASE_A, "name": "other-bert"}),
            "bob/news")
    for _ in range(3):
        requests.get(f"{registry.url}/bob/news/resolve/main/adapter.safetensors")
    return {"alice": alice, "bob": bob}


def ids(answer) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [a["id"] for a in answer.json()["items"]]


def test_search_filters_sorts_and_hides_private_adapters(registry, catalogue):
    url = f"{registry.url}/api/v1/adapters"
    assert ids(requests.get(url)) == ["bob/news", "alice/ner", "alice/sentiment"]
    assert ids(requests.get(url, headers=auth(catalogue["alice"]))) == [
        "bob/news", "alice/secret", "alice/ner", "alice/sentiment"]
    assert ids(requests.get(url, params={"task": "tagging"})) == ["alice/ner"]
    assert ids(requests.get(url, params={"head_type": "sequence_classification",
                                         "base_model": "tiny-bert"})) == ["alice/sentiment"]
    assert ids(requests.get(url, params={"base_hash": BASE_B})) == ["alice/ner"]
    assert ids(requests.get(url, params=[("tag", "english"), ("tag", "sentiment")])) == [
        "alice/sentiment"]
    assert ids(requests.get(url, params={"q": "REVIEW retrained"})) == ["alice/sentiment"]
    assert ids(requests.get(url, params={"q": "nomatch%"})) == []  # % is no wildcard
    assert ids(requests.get(url, params={"sort": "name"})) == [
        "alice/ner", "bob/news", "alice/sentiment"]
    assert ids(requests.get(url, params={"sort": "recent"}))[0] == "bob/news"


def test_search_pages(registry, catalogue):
    page = requests.get(f"{registry.url}/api/v1/adapters",
                        params={"per_page": 2, "page": 2, "sort": "name"}).json()
    assert [a["id"] for a in page["items"]] == ["alice/sentiment"]
    assert (page["total"], page["pages"], page["page"], page["per_page"]) == (3, 2, 2, 2)
    bad = requests.get(f"{registry.url}/api/v1/adapters", params={"page": "two"})
    assert bad.status_code == 400
    assert bad.json()["error"] == "query parameter 'page' must be an integer, not 'two'"
    assert requests.get(f"{registry.url}/api/v1/adapters",
                        params={"sort": "stars"}).status_code == 400


def test_adapter_details_and_versions(registry, catalogue):
    detail = requests.get(f"{registry.url}/api/v1/adapters/alice/sentiment").json()
    assert detail["latest_version"] == "1.1.0"
    assert detail["latest"]["manifest"]["version"] == "1.1.0"
    assert {f["path"] for f in detail["latest"]["files"]} == {
        "README.md", "adapter.safetensors", "manifest.json", "model.sig"}
    assert detail["tags"] == ["english", "sentiment"]
    versions = requests.get(f"{registry.url}/api/v1/adapters/alice/sentiment/versions").json()
    assert [v["version"] for v in versions["items"]] == ["1.1.0", "1.0.0"]
    assert versions["items"][0]["pushed_by"] == "alice"
    news = requests.get(f"{registry.url}/api/v1/adapters/bob/news").json()
    assert news["downloads"] == 3 and news["latest"]["downloads"] == 3
    hidden = requests.get(f"{registry.url}/api/v1/adapters/alice/secret",
                          headers=auth(catalogue["bob"]))
    assert hidden.status_code == 404 and hidden.headers["X-Error-Code"] == "RepoNotFound"


def test_adapters_compatible_with_a_base(registry, catalogue):
    answer = requests.get(f"{registry.url}/api/v1/bases/{BASE_A}/adapters").json()
    assert [(a["id"], a["compatible_version"], a["compatible_versions"])
            for a in answer["items"]] == [("bob/news", "1.0.0", ["1.0.0"]),
                                          ("alice/sentiment", "1.1.0", ["1.1.0", "1.0.0"])]
    empty = requests.get(f"{registry.url}/api/v1/bases/sha256:{'0' * 64}/adapters").json()
    assert empty["items"] == [] and empty["total"] == 0


def test_yank_unyank_and_delete(registry, catalogue, signing_key, tmp_path):
    base = f"{registry.url}/api/v1/adapters/alice/sentiment/versions"
    alice = auth(catalogue["alice"])
    assert requests.post(f"{base}/1.1.0/yank", json={}, headers=alice).status_code == 400
    assert requests.post(f"{base}/1.1.0/yank", json={"reason": "bad"},
                         headers=auth(catalogue["bob"])).status_code == 403
    assert requests.post(f"{base}/1.1.0/yank", json={"reason": "bad"},
                         headers=alice).json()["yank_reason"] == "bad"
    assert requests.get(f"{registry.url}/api/v1/adapters/alice/sentiment").json()[
        "latest_version"] == "1.0.0"
    assert requests.delete(f"{base}/1.1.0/yank", headers=alice).json()["yanked"] is False

    assert requests.delete(f"{base}/1.1.0", headers=alice).status_code == 204
    gone = requests.get(f"{registry.url}/alice/sentiment/resolve/1.1.0/manifest.json")
    assert gone.status_code == 404 and gone.headers["X-Error-Code"] == "RevisionNotFound"
    assert requests.get(f"{registry.url}/api/v1/adapters/alice/sentiment").json()[
        "latest_version"] == "1.0.0"
    again = signed_bundle(tmp_path / "again", signing_key, name="sentiment", version="1.1.0")
    reused = post_commit(registry, catalogue["alice"], [HEADER, *bundle_ops(again)],
                         repo="alice/sentiment")
    assert reused.status_code == 409
    assert reused.json()["error"] == ("version 1.1.0 of alice/sentiment was deleted; version "
                                      "numbers are never reused")


def proven(registry, token: str, key, pem: str | None = None) -> dict:
    """A POST /api/v1/keys body for `pem` (default: `key`'s public half) with a proof signed
    by `key`'s private half."""
    challenge = requests.post(f"{registry.url}/api/v1/keys/challenge", headers=auth(token))
    assert challenge.status_code == 201
    nonce = challenge.json()["challenge"]
    private = serialization.load_pem_private_key(key.private_path.read_bytes(), None)
    return {"pem": key.public_pem if pem is None else pem, "challenge": nonce,
            "signature": sign_challenge(private, nonce)}


def test_public_keys_are_uploaded_listed_and_deleted(registry, signing_key):
    token = registry.user("carol")
    url = f"{registry.url}/api/v1/keys"
    added = requests.post(url, json={**proven(registry, token, signing_key), "name": "laptop"},
                          headers=auth(token))
    assert added.status_code == 201
    der = serialization.load_pem_public_key(signing_key.public_pem.encode()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    key_id = "sha256:" + hashlib.sha256(der).hexdigest()
    assert added.json()["key_id"] == key_id
    assert requests.post(url, json=proven(registry, token, signing_key),
                         headers=auth(token)).status_code == 409
    assert [k["name"] for k in requests.get(url, headers=auth(token)).json()["items"]] == [
        "laptop"]
    private = signing_key.private_path.read_text()
    for pem in ("hello", private):
        bad = requests.post(url, json=proven(registry, token, signing_key, pem),
                            headers=auth(token))
        assert bad.status_code == 400
        assert bad.json()["error"] == "not a PEM public key"
    assert requests.delete(f"{url}/{key_id}", headers=auth(token)).status_code == 204
    assert requests.get(url, headers=auth(token)).json()["items"] == []
    assert requests.delete(f"{url}/{key_id}", headers=auth(token)).status_code == 404


def test_namespace_keys_are_public_and_cover_org_members(registry, signing_key):
    registry.user("dave", key=signing_key)
    registry.user("erin")
    registry.org("lab", "dave", "erin")
    url = f"{registry.url}/api/v1/namespaces"
    dave = requests.get(f"{url}/dave/keys")  # no token: pullers verify with these
    assert dave.status_code == 200
    assert dave.json()["kind"] == "user"
    assert [k["pem"] for k in dave.json()["items"]] == [signing_key.public_pem]
    assert requests.get(f"{url}/erin/keys").json()["items"] == []
    lab = requests.get(f"{url}/lab/keys").json()
    assert lab["kind"] == "org" and [k["pem"] for k in lab["items"]] == [signing_key.public_pem]
    missing = requests.get(f"{url}/nobody/keys")
    assert missing.status_code == 404 and missing.json()["error"] == "no user or organisation named 'nobody'"


def test_tokens_are_hashed_scoped_and_revocable(registry, signing_key):
    admin = registry.user("dave", key=signing_key)
    url = f"{registry.url}/api/v1/tokens"
    made = requests.post(url, json={"name": "ci", "scope": "read"}, headers=auth(admin))
    assert made.status_code == 201
    secret = made.json()["token"]
    assert secret.startswith("hubr_") and made.json()["prefix"] == secret[:12]
    with registry.session() as session:
        stored = session.scalar(select(Token).where(Token.id == made.json()["id"]))
        assert stored.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    listing = requests.get(url, headers=auth(admin)).json()["items"]
    assert all("token" not in t for t in listing) and len(listing) == 2

    refused = requests.post(f"{registry.url}/api/repos/create", json={"name": "x"},
                            headers=auth(secret))
    assert refused.status_code == 403
    assert refused.json()["error"] == "token 'ci' has read scope; this needs write scope"
    assert requests.get(f"{registry.url}/api/whoami-v2", headers=auth(secret)).status_code == 200

    assert requests.delete(f"{url}/{made.json()['id']}", headers=auth(admin)).status_code == 204
    revoked = requests.get(f"{registry.url}/api/whoami-v2", headers=auth(secret))
    assert revoked.status_code == 401
    assert revoked.json()["error"] == "invalid or revoked token"


def test_bad_input_is_answered_in_json_never_500(registry):
    token = registry.user("erin")
    cases = [
        requests.post(f"{registry.url}/api/repos/create", data=b"{not json",
                      headers=auth(token)),
        requests.post(f"{registry.url}/api/repos/create", json={"name": 5}, headers=auth(token)),
        requests.post(f"{registry.url}/api/repos/create", json=["x"], headers=auth(token)),
        requests.post(f"{registry.url}/api/repos/create", json={"name": "../etc"},
                      headers=auth(token)),
        requests.get(f"{registry.url}/api/whoami-v2", headers={"Authorization": "Basic abc"}),
        requests.get(f"{registry.url}/no/such/route"),
        requests.put(f"{registry.url}/api/v1/adapters"),
        requests.post(f"{registry.url}/api/models/erin/x/preupload/main",
                      json={"files": [{"path": "../x", "size": 1}]}, headers=auth(token)),
    ]
    assert [c.status_code for c in cases] == [400, 400, 400, 400, 401, 404, 405, 404]
    for answer in cases:
        assert answer.headers["Content-Type"] == "application/json"
        assert answer.json()["error"]


def test_tokens_never_reach_the_log(registry, signing_key, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    token = registry.user("frank", key=signing_key)
    requests.post(f"{registry.url}/api/repos/create", json={"name": "sst2"}, headers=auth(token))
    post_commit(registry, token, b"garbage", repo="frank/sst2")
    requests.get(f"{registry.url}/api/whoami-v2", headers=auth(token + "x"))
    assert "whoami-v2" in caplog.text
    assert token not in caplog.text and token[5:] not in caplog.text


def test_openapi_document_is_valid_and_lists_the_endpoints(registry):
    doc = requests.get(f"{registry.url}/api/v1/openapi.json").json()
    validate(doc)
    assert {"/api/v1/adapters", "/api/v1/bases/{base_hash}/adapters", "/api/v1/keys",
            "/api/v1/adapters/{namespace}/{name}/versions/{version}/yank"} <= set(doc["paths"])
    rules = {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", r.rule)
             for r in registry.app.url_map.iter_rules() if r.rule.startswith("/api/v1/")}
    assert rules == set(doc["paths"])
