"""LoRA as the second method, and the manifest's `architecture.type` choosing between methods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from factories import LORA, make_adapter_dir

from hubcli.format import manifest as manifest_io
from hubcli.local.attach import attach, verify_adapter
from hubcli.bundle import check_bundle, make_bundle
from hubcli.base.load import load_base
from hubcli.core.config import HoulsbyConfig, LoraConfig, config_from_manifest
from hubcli.core.heads import HeadConfig
from hubcli.core.model import AdapterModel
from hubcli.format.spec import expected_tensors
from hubcli.errors import ManifestError

HEAD = HeadConfig("sequence_classification", 2, ("neg", "pos"))
OLD = Path(__file__).parent / "data" / "houlsby-v1"


def test_a_fresh_lora_adapter_changes_nothing(base, batch):
    model = AdapterModel(base.encoder)
    with torch.no_grad():
        before = model.encode(**batch)
        model.add_adapter("l", LoraConfig(rank=4), HEAD)
        model.activate("l")
        after = model.encode(**batch)
    assert torch.equal(before, after)
    a = model.named_adapter_tensors("l")["adapters.0.query.A.weight"]
    assert a.abs().sum() > 0  # only B starts at zero


def test_lora_parameter_count_is_2rd_per_target_and_matches_the_spec(base):
    model = AdapterModel(base.encoder)
    config = LoraConfig(rank=4, alpha=8)
    model.add_adapter("l", config, HEAD)
    counts = model.parameter_counts("l")
    d, r = 32, 4
    assert counts["adapters"] == 2 * 2 * (2 * r * d)  # 2 layers x (query, value)
    assert counts["layernorm"] == 0
    manifest = {"base_model": {"hidden_size": 32, "num_layers": 2},
                "architecture": config.to_manifest(2), "head": HEAD.to_manifest()}
    actual = {k: tuple(v.shape) for k, v in model.adapter_state_dict("l").items()}
    assert actual == expected_tensors(manifest)
    assert actual["adapters.1.value.A.weight"] == (r, d)
    assert actual["adapters.1.value.B.weight"] == (d, r)


def test_lora_update_is_scaled_b_a_x(base):
    model = AdapterModel(base.encoder)
    model.add_adapter("l", LoraConfig(rank=2, alpha=6), HEAD)
    site = model.adapter_sites[(0, "query")]
    lora = site.adapters["l"]
    with torch.no_grad():
        lora.B.weight.normal_()
        x = torch.randn(1, 3, 32)
        site.active = "l"
        expected = site.base_layer(x) + (x @ lora.A.weight.T @ lora.B.weight.T) * 3.0
        assert torch.allclose(site(x), expected, atol=1e-6)


def test_training_lora_leaves_the_base_and_other_adapters_bit_identical(base, batch):
    model = AdapterModel(base.encoder)
    model.add_adapter("l", LoraConfig(rank=4), HEAD)
    model.add_adapter("h", HoulsbyConfig(bottleneck=4), HEAD)
    frozen = {k: v.clone() for k, v in model.state_dict().items() if ".l." not in k
              and not k.startswith("heads.l.")}
    model.activate("l")
    opt = torch.optim.AdamW(model.trainable_parameters("l"), lr=1e-2)
    for _ in range(2):
        torch.nn.functional.cross_entropy(model(**batch), torch.tensor([1, 0])).backward()
        own = {id(p) for p in model.trainable_parameters("l")}
        assert all(p.grad is None for p in model.parameters() if id(p) not in own)
        opt.step()
        opt.zero_grad()
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items())
    assert not torch.equal(model.adapter_state_dict("l")["adapters.0.value.B.weight"],
                           torch.zeros(32, 4))


def test_lora_manifests_validate_and_pass_the_bundle_check(tmp_path):
    directory = make_adapter_dir(tmp_path / "lora", name="lora", architecture=LORA)
    make_bundle(directory)
    check_bundle(directory)
    m = manifest_io.read(directory)
    assert isinstance(config_from_manifest(m["architecture"]), LoraConfig)
    bad = {**m, "architecture": {**m["architecture"], "bottleneck": 4}}
    with pytest.raises(ManifestError, match="bottleneck"):
        manifest_io.validate(bad)


def test_an_adapter_folder_written_before_lora_loads_and_predicts_as_before(tiny_base_dir):
    """tests/data/houlsby-v1 was written by the code before this change; the expected logits
    are what that code computed with it on the tiny base."""
    expected = json.loads((OLD.parent / "houlsby-v1.expected.json").read_text())
    base = load_base(str(tiny_base_dir))
    model = AdapterModel(base.encoder)
    manifest = attach(model, base.info, verify_adapter(OLD, allow_unsigned=True),
                      allow_base_mismatch=True)
    assert "type" in manifest["architecture"] and manifest["architecture"]["type"] == "houlsby"
    model.activate(manifest["name"])
    model.eval()
    batch = dict(base.tokenizer(expected["texts"], padding=True, return_tensors="pt"))
    with torch.no_grad():
        logits = model(**batch)
    assert torch.allclose(logits, torch.tensor(expected["logits"]), atol=1e-6, rtol=0)
