"""Base-model repositories with the real clients: a tiny BERT saved by transformers, pushed
with `upload_folder` (whole and sharded) and loaded back with `AutoModel.from_pretrained`;
its content and tokenizer hashes computed on push with the client's own code; what a base
may not hold."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import requests
from huggingface_hub.errors import HfHubHTTPError

from hubcli.base.hashing import content_hash


@pytest.fixture
def alice(registry) -> str:
    return registry.user("alice")


@pytest.fixture
def endpoint(registry, hf, monkeypatch):
    """transformers and huggingface_hub pointed at the registry, as HF_ENDPOINT does."""
    monkeypatch.setattr(hf.constants, "ENDPOINT", registry.url)
    monkeypatch.setattr(hf.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        registry.url + "/{repo_id}/resolve/{revision}/{filename}")
    return registry.url


def _api(hf, registry, token):
    return hf.HfApi(endpoint=registry.url, token=token)


def _push(api, folder: Path, repo_id: str = "alice/tiny-bert"):
    api.create_repo(repo_id, exist_ok=True)
    return api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message="base")


def _hosted(registry, digest: str, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{registry.url}/api/v1/bases/{digest}", headers=headers)


def test_a_pushed_base_loads_with_automodel_and_its_hashes_are_the_clients(
        registry, hf, alice, endpoint, tiny_base_dir, tmp_path, base):
    import torch
    from transformers import AutoModel, AutoTokenizer

    api = _api(hf, registry, alice)
    commit = _push(api, tiny_base_dir)
    info = api.model_info("alice/tiny-bert")
    assert info.sha == commit.oid
    assert "model.safetensors" in {s.rfilename for s in info.siblings}
    assert info.library_name == "transformers" and "base-model" in info.tags

    hosted = _hosted(registry, base.info.content_hash).json()
    assert hosted["id"] == "alice/tiny-bert" and hosted["version"] == "1.0.0"
    assert hosted["commit"] == commit.oid
    assert hosted["content_hash"] == content_hash(tiny_base_dir)
    assert hosted["tokenizer_hash"] == base.info.tokenizer_hash  # the client's own hash
    assert hosted["model_type"] == "bert"

    model = AutoModel.from_pretrained("alice/tiny-bert", token=alice,
                                      cache_dir=tmp_path / "tf")
    local = AutoModel.from_pretrained(tiny_base_dir)
    remote_state, local_state = model.state_dict(), local.state_dict()
    assert remote_state.keys() == local_state.keys()
    assert all(torch.equal(remote_state[k], local_state[k]) for k in local_state)
    tokenizer = AutoTokenizer.from_pretrained("alice/tiny-bert", token=alice,
                                              cache_dir=tmp_path / "tf")
    assert tokenizer("a gripping film")["input_ids"] == \
        base.tokenizer("a gripping film")["input_ids"]

    # The same files again change nothing; other files are the next version.
    assert _push(api, tiny_base_dir).oid == commit.oid
    assert [t.name for t in api.list_repo_refs("alice/tiny-bert").tags] == ["1.0.0"]
    assert [m.id for m in api.list_models(filter="base-model")] == ["alice/tiny-bert"]
    # A base is not an adapter: neither the native search nor "compatible adapters" list it.
    assert requests.get(f"{registry.url}/api/v1/adapters").json()["total"] == 0
    compatible = requests.get(f"{registry.url}/api/v1/bases/{hosted['content_hash']}/adapters")
    assert compatible.json()["total"] == 0


def test_a_sharded_base_hashes_as_the_whole_one(registry, hf, alice, endpoint, tiny_base_dir,
                                                tmp_path):
    import torch
    from transformers import AutoModel

    sharded = tmp_path / "sharded"
    AutoModel.from_pretrained(tiny_base_dir).save_pretrained(sharded, max_shard_size="1MB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tiny_base_dir / name, sharded / name)
    shards = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shards) > 1
    api = _api(hf, registry, alice)
    _push(api, sharded, "alice/sharded")
    hosted = _hosted(registry, content_hash(tiny_base_dir)).json()
    assert hosted["id"] == "alice/sharded"
    assert sorted(f["path"] for f in hosted["files"] if f["path"].endswith(".safetensors")) \
        == shards
    model = AutoModel.from_pretrained("alice/sharded", token=alice, cache_dir=tmp_path / "tf")
    assert torch.equal(model.embeddings.word_embeddings.weight,
                       AutoModel.from_pretrained(tiny_base_dir).embeddings.word_embeddings.weight)


@pytest.mark.parametrize("extra, message", [
    ("pytorch_model.bin", "pytorch_model.bin: pickle-based weights are not allowed"),
    ("modeling_tiny.py", "modeling_tiny.py: code files are not allowed in a base model"),
    ("notes.txt", "notes.txt: file not allowed in a base model"),
])
def test_a_base_with_pickles_code_or_other_files_is_refused(registry, hf, alice, tiny_base_dir,
                                                            tmp_path, extra, message):
    folder = tmp_path / "base"
    shutil.copytree(tiny_base_dir, folder)
    (folder / extra).write_bytes(b"import os\n")
    with pytest.raises(HfHubHTTPError) as e:
        _push(_api(hf, registry, alice), folder)
    assert e.value.response.status_code == 422
    assert e.value.response.headers["X-Error-Code"] == "InvalidBundle"
    assert message in str(e.value)
    assert _hosted(registry, content_hash(tiny_base_dir)).status_code == 404


def test_a_base_needs_its_config_and_every_shard(registry, hf, alice, tiny_base_dir, tmp_path):
    folder = tmp_path / "base"
    shutil.copytree(tiny_base_dir, folder)
    (folder / "config.json").unlink()
    with pytest.raises(HfHubHTTPError) as e:
        _push(_api(hf, registry, alice), folder)
    assert "a base model needs config.json" in str(e.value)
    shutil.copyfile(tiny_base_dir / "config.json", folder / "config.json")
    (folder / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-00002-of-00002.safetensors"}}')
    with pytest.raises(HfHubHTTPError) as e:
        _push(_api(hf, registry, alice), folder, "alice/other")
    assert "names shards that are not here: model-00002-of-00002.safetensors" in str(e.value)


def test_a_private_base_is_found_by_its_readers_only(registry, hf, alice, tiny_base_dir, base):
    api = _api(hf, registry, alice)
    api.create_repo("alice/tiny-bert", private=True)
    _push(api, tiny_base_dir)
    assert _hosted(registry, base.info.content_hash).status_code == 404
    assert _hosted(registry, base.info.content_hash, alice).status_code == 200


def test_the_adapter_page_links_its_base_and_the_base_page_lists_its_adapters(
        registry, hf, signing_key, tiny_base_dir, tmp_path):
    from conftest import signed_bundle

    token = registry.user("bob", key=signing_key)
    api = _api(hf, registry, token)
    _push(api, tiny_base_dir, "bob/tiny-bert")
    digest = content_hash(tiny_base_dir)
    bundle = signed_bundle(tmp_path / "a", signing_key, name="sst2",
                           base_model={"name": "tiny-bert", "content_hash": digest})
    _push(api, bundle, "bob/sst2")
    _push(api, signed_bundle(tmp_path / "b", signing_key, name="other"), "bob/other")

    adapter_page = requests.get(f"{registry.url}/bob/sst2").text
    assert 'Hosted here: <a href="/bob/tiny-bert/versions/1.0.0">bob/tiny-bert</a>' \
        in adapter_page
    assert "Hosted here" not in requests.get(f"{registry.url}/bob/other").text
    base_page = requests.get(f"{registry.url}/bob/tiny-bert").text
    assert "Compatible adapters" in base_page
    assert 'href="/bob/sst2/versions/1.0.0"' in base_page
    assert "/bob/other/" not in base_page
    assert digest in base_page
    assert 'AutoModel.from_pretrained(&#34;bob/tiny-bert&#34;, revision=&#34;1.0.0&#34;)' \
        in base_page
