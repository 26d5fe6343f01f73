"""Composed adapters on the registry: requirements checked and recorded at push, "uses" and
"used by" on the adapter page, deleting a required version refused (409), yanking allowed
with a warning on the dependants."""

from __future__ import annotations

import pytest
import requests
from conftest import HEADER, bundle_ops, post_commit, signed_bundle

from factories import FUSION, requirement


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def push(registry, token: str, folder, repo: str):
    ns, name = repo.split("/")
    requests.post(f"{registry.url}/api/repos/create", headers=auth(token),
                  json={"name": name, "organization": ns})
    return post_commit(registry, token, [HEADER, *bundle_ops(folder)], repo=repo)


@pytest.fixture
def published(registry, signing_key, tmp_path):
    """alice's sst2 and stsb, and a fusion over both pinned by reference."""
    token = registry.user("alice", key=signing_key)
    parts = {}
    for seed, name in enumerate(["sst2", "stsb"]):
        parts[name] = signed_bundle(tmp_path / name, signing_key, name=name, seed=seed)
        assert push(registry, token, parts[name], f"alice/{name}").status_code == 200
    requires = [requirement(parts[n], ref=f"alice/{n}") for n in ("sst2", "stsb")]
    fusion = signed_bundle(tmp_path / "fusion", signing_key, name="fusion",
                           architecture=FUSION, requires=requires)
    answer = push(registry, token, fusion, "alice/fusion")
    assert answer.status_code == 200, answer.text
    return token, parts, requires


@pytest.mark.parametrize("change, error", [
    (lambda r: r.pop("ref"), "requires sst2@1.0.0 by a local folder only"),
    (lambda r: r.update(ref="alice/nowhere"),
     "requires alice/nowhere@1.0.0, which this registry does not have"),
    (lambda r: r.update(manifest_sha256="0" * 64),
     "requires alice/sst2@1.0.0 with manifest sha256 " + "0" * 64),
])
def test_a_push_must_require_versions_this_registry_has(registry, published, signing_key,
                                                        tmp_path, change, error):
    token, _, requires = published
    requires = [dict(r) for r in requires]
    requires[0].setdefault("path", "../sst2")
    change(requires[0])
    bad = signed_bundle(tmp_path / "bad", signing_key, name="bad", architecture=FUSION,
                        requires=requires)
    answer = push(registry, token, bad, "alice/bad")
    assert answer.status_code == 422
    assert error in answer.json()["error"]


def test_a_required_version_cannot_be_deleted_but_can_be_yanked(registry, published):
    token = published[0]
    versions = f"{registry.url}/api/v1/adapters/alice"
    refused = requests.delete(f"{versions}/sst2/versions/1.0.0", headers=auth(token))
    assert refused.status_code == 409
    assert refused.json()["error"] == "alice/sst2@1.0.0 is required by alice/fusion@1.0.0"
    assert "yank" in refused.json()["hint"]
    assert requests.get(f"{registry.url}/alice/sst2/resolve/1.0.0/manifest.json").ok

    yank = requests.post(f"{versions}/sst2/versions/1.0.0/yank", json={"reason": "label noise"},
                         headers=auth(token))
    assert yank.status_code == 200
    page = requests.get(f"{registry.url}/alice/fusion").text
    assert "Uses alice/sst2@1.0.0, which is yanked</strong>: label noise" in page
    assert page.index("alice/sst2@1.0.0") < page.index("alice/stsb@1.0.0")

    assert requests.delete(f"{versions}/fusion/versions/1.0.0",
                           headers=auth(token)).status_code == 204
    assert requests.delete(f"{versions}/sst2/versions/1.0.0",
                           headers=auth(token)).status_code == 204


def test_the_adapter_page_shows_uses_and_used_by(registry, published):
    used = requests.get(f"{registry.url}/alice/stsb").text
    assert "Used by" in used and "/alice/fusion/versions/1.0.0" in used
    fusion = requests.get(f"{registry.url}/alice/fusion").text
    assert "Uses" in fusion and "/alice/sst2/versions/1.0.0" in fusion
    assert "AdapterFusion over the adapters it uses" in fusion
    assert "which is yanked" not in fusion
