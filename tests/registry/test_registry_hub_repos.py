"""The Hub protocol's repository listing and management against the real huggingface_hub
client: list_models, delete_repo, move_repo, list_repo_commits, get_paths_info, and the typed
refusals of tags, branches and gated access."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from conftest import signed_bundle
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from registry_server.models import Version
from sqlalchemy import select


@pytest.fixture
def registry_config(registry_config) -> dict:
    return {**registry_config, "PAGE_SIZE": 2}  # three repositories make two pages


@pytest.fixture
def alice(registry, signing_key) -> str:
    token = registry.user("alice", key=signing_key)
    registry.user("bob")
    registry.org("acme", "alice")
    return token


def _api(hf, registry, token):
    return hf.HfApi(endpoint=registry.url, token=token)


def push(api, folder: Path, repo_id: str):
    api.create_repo(repo_id, exist_ok=True)
    return api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message="push")


@pytest.fixture
def three(registry, hf, alice, signing_key, tmp_path):
    """alice/sst2 (sentiment), alice/ner (tagging, base other-bert), acme/sst2 (sentiment)."""
    api = _api(hf, registry, alice)
    push(api, signed_bundle(tmp_path / "a", signing_key, name="sst2"), "alice/sst2")
    push(api, signed_bundle(tmp_path / "b", signing_key, name="ner", tags=["ner"], seed=1,
                            base_model={"name": "other-bert"}), "alice/ner")
    push(api, signed_bundle(tmp_path / "c", signing_key, name="sst2", seed=2), "acme/sst2")
    return api


def _ids(models) -> list[str]:
    return [m.id for m in models]


def test_list_models_filters_sorts_and_follows_link_pages(three):
    api = three
    # Two a page: the client follows the Link header to the third.
    assert sorted(_ids(api.list_models())) == ["acme/sst2", "alice/ner", "alice/sst2"]
    assert _ids(api.list_models(sort="id")) == ["alice/ner", "alice/sst2", "acme/sst2"]
    assert sorted(_ids(api.list_models(author="alice"))) == ["alice/ner", "alice/sst2"]
    assert sorted(_ids(api.list_models(filter="sentiment"))) == ["acme/sst2", "alice/sst2"]
    assert _ids(api.list_models(filter=["ner", "classification"])) == ["alice/ner"]
    assert _ids(api.list_models(filter="base_model:other-bert")) == ["alice/ner"]
    assert _ids(api.list_models(search="ner")) == ["alice/ner"]
    assert _ids(api.list_models(sort="created_at")) == ["acme/sst2", "alice/ner", "alice/sst2"]
    assert len(_ids(api.list_models(limit=1))) == 1
    full = next(iter(api.list_models(author="acme", full=True)))
    assert [s.rfilename for s in full.siblings] == ["README.md", "adapter.safetensors",
                                                    "manifest.json", "model.sig"]
    with pytest.raises(HfHubHTTPError) as e:
        list(api.list_models(sort="likes"))
    assert e.value.response.status_code == 400
    assert e.value.response.headers["X-Error-Code"] == "Unsupported"


def test_list_models_hides_private_repositories_from_others(registry, hf, three):
    three.update_repo_settings("alice/ner", private=True)
    bob = _api(hf, registry, registry.user("carol"))
    assert sorted(_ids(bob.list_models())) == ["acme/sst2", "alice/sst2"]
    assert "alice/ner" in _ids(three.list_models())


def test_delete_repo_deletes_every_version_and_keeps_the_name(registry, hf, three, tmp_path,
                                                             signing_key):
    api = three
    api.delete_repo("alice/sst2")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("alice/sst2")
    with pytest.raises(RepositoryNotFoundError):
        hf.hf_hub_download("alice/sst2", "manifest.json", revision="1.0.0", endpoint=registry.url,
                           token=api.token, cache_dir=tmp_path / "c")
    assert "alice/sst2" not in _ids(api.list_models())
    with registry.session() as session:
        deleted = {v.deleted_at is not None for v in session.scalars(select(Version))}
    assert deleted == {True, False}  # its version only; acme/sst2 and alice/ner are untouched
    assert api.model_info("acme/sst2").sha is not None
    # The name stays taken: a new repository there could answer old pins with other bytes.
    with pytest.raises(HfHubHTTPError) as e:
        api.create_repo("alice/sst2")
    assert e.value.response.status_code == 409
    assert "was deleted; its name is never reused" in str(e.value)
    api.delete_repo("alice/sst2", missing_ok=True)
    with pytest.raises(RepositoryNotFoundError):
        api.delete_repo("alice/sst2")
    bob = _api(hf, registry, registry.user("dave"))
    with pytest.raises(HfHubHTTPError) as e:
        bob.delete_repo("alice/ner")
    assert e.value.response.status_code == 403


def test_move_repo_renames_and_old_names_and_pins_still_resolve(registry, hf, three, tmp_path,
                                                                signing_key):
    api = three
    before = api.model_info("alice/sst2").sha
    api.move_repo("alice/sst2", "acme/sentiment")
    assert api.model_info("acme/sentiment").sha == before
    # The old id redirects: a pin someone depends on keeps the same bytes.
    assert api.model_info("alice/sst2").id == "acme/sentiment"
    old = hf.hf_hub_download("alice/sst2", "manifest.json", revision="1.0.0",
                             endpoint=registry.url, token=api.token, cache_dir=tmp_path / "c")
    assert Path(old).read_bytes() == (tmp_path / "a" / "manifest.json").read_bytes()
    with pytest.raises(HfHubHTTPError) as e:
        api.create_repo("alice/sst2")
    assert e.value.response.status_code == 409
    assert "was moved to acme/sentiment" in str(e.value)
    with pytest.raises(HfHubHTTPError) as e:
        api.move_repo("alice/ner", "acme/sentiment")
    assert e.value.response.status_code == 409
    with pytest.raises(HfHubHTTPError) as e:
        api.move_repo("alice/ner", "bob/ner")  # alice may not write to bob's namespace
    assert e.value.response.status_code == 403
    # Moving back takes the old name again, and nothing else points there.
    api.move_repo("acme/sentiment", "alice/sst2")
    assert api.model_info("alice/sst2").id == "alice/sst2"
    assert api.model_info("acme/sentiment").id == "alice/sst2"


def test_list_repo_commits_lists_versions_up_to_the_revision(registry, hf, alice, signing_key,
                                                             tmp_path):
    api = _api(hf, registry, alice)
    shas = {v: push(api, signed_bundle(tmp_path / v, signing_key, version=v, seed=i),
                    "alice/sst2").oid
            for i, v in enumerate(["1.0.0", "1.1.0", "2.0.0"])}
    commits = api.list_repo_commits("alice/sst2")
    assert [c.commit_id for c in commits] == [shas["2.0.0"], shas["1.1.0"], shas["1.0.0"]]
    assert commits[0].authors == ["alice"] and commits[0].title == "push"
    assert [c.commit_id for c in api.list_repo_commits("alice/sst2", revision="1.1.0")] == \
        [shas["1.1.0"], shas["1.0.0"]]


def test_get_paths_info_describes_files_and_skips_missing_ones(registry, hf, three, tmp_path):
    infos = three.get_paths_info("alice/sst2", ["manifest.json", "adapter.safetensors",
                                                "nothing.txt"])
    by_path = {i.path: i for i in infos}
    assert sorted(by_path) == ["adapter.safetensors", "manifest.json"]
    weights = (tmp_path / "a" / "adapter.safetensors").read_bytes()
    assert by_path["adapter.safetensors"].size == len(weights)
    assert by_path["adapter.safetensors"].lfs.size == len(weights)
    assert by_path["manifest.json"].lfs is None


def test_tags_branches_and_gating_are_refused_with_a_typed_error(registry, hf, three):
    api = three
    for call, text in ((lambda: api.create_tag("alice/sst2", tag="v9"), "tags are versions"),
                       (lambda: api.create_branch("alice/sst2", branch="dev"),
                        "branches are not supported"),
                       (lambda: api.update_repo_settings("alice/sst2", gated="auto"),
                        "gated access ('auto') is not supported")):
        with pytest.raises(HfHubHTTPError) as e:
            call()
        assert e.value.response.status_code == 400
        assert e.value.response.headers["X-Error-Code"] == "Unsupported"
        assert text in str(e.value)
    assert api.model_info("alice/sst2").gated is False
    api.update_repo_settings("alice/sst2", gated=False)  # what it is already: accepted
    answer = requests.put(f"{registry.url}/api/models/alice/sst2/settings",
                          headers={"Authorization": f"Bearer {api.token}"},
                          json={"discussionsDisabled": True})
    assert (answer.status_code, answer.headers["X-Error-Code"]) == (400, "Unsupported")
    assert "discussionsDisabled not supported" in answer.json()["error"]
