"""The base-model content hash is independent of file format and sharding, and cached."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from hubcli.base import hashing as basehash


def tensors():
    g = torch.Generator().manual_seed(0)
    return {"b.weight": torch.randn(3, 4, generator=g), "a.bias": torch.randn(4, generator=g),
            "c.ids": torch.arange(5)}


def test_same_hash_for_single_file_shards_and_pickle(tmp_path):
    t = tensors()
    one, shards, pt = tmp_path / "one", tmp_path / "shards", tmp_path / "pt"
    for d in (one, shards, pt):
        d.mkdir()
    save_file(t, str(one / "model.safetensors"))
    save_file({"b.weight": t["b.weight"]}, str(shards / "model-00001-of-00002.safetensors"))
    save_file({"a.bias": t["a.bias"], "c.ids": t["c.ids"]},
              str(shards / "model-00002-of-00002.safetensors"))
    torch.save(t, pt / "pytorch_model.bin")
    digests = {basehash.content_hash(d) for d in (one, shards, pt)}
    assert len(digests) == 1
    assert digests.pop().startswith("sha256:")


def test_any_changed_value_changes_the_hash(tmp_path):
    t = tensors()
    save_file(t, str(tmp_path / "model.safetensors"))
    first = basehash.content_hash(tmp_path)
    t["a.bias"][0] += 1e-3
    save_file(t, str(tmp_path / "model.safetensors"))
    assert basehash.content_hash(tmp_path) != first


def test_second_call_uses_the_cache(tmp_path, monkeypatch):
    save_file(tensors(), str(tmp_path / "model.safetensors"))
    first = basehash.content_hash(tmp_path)
    monkeypatch.setattr(basehash, "hash_entries", lambda _e: (_ for _ in ()).throw(AssertionError))
    assert basehash.content_hash(tmp_path) == first
