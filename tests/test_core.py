"""The injection core on a tiny random BERT: identity, isolation, counts, tensor layout."""

from __future__ import annotations

import copy

import pytest
import torch

from hubcli.base.load import load_base
from hubcli.core.config import HoulsbyConfig
from hubcli.core.heads import HeadConfig
from hubcli.core.model import AdapterModel
from hubcli.format.spec import adapter_param_count, expected_tensors
from hubcli.errors import AdapterError, UnsupportedModelError

HEAD = HeadConfig("sequence_classification", 2, ("neg", "pos"))


def hidden(encoder, batch):
    with torch.no_grad():
        return encoder(**batch).last_hidden_state


def test_no_active_adapter_is_bit_identical_to_untouched_base(base, batch):
    untouched = copy.deepcopy(base.encoder)
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(), HEAD)
    model.activate("a")
    model.deactivate()
    assert torch.equal(hidden(model.encoder, batch), hidden(untouched, batch))


def test_fresh_adapter_is_near_identity(base, batch):
    before = hidden(base.encoder, batch)
    model = AdapterModel(base.encoder)
    torch.manual_seed(1)
    model.add_adapter("a", HoulsbyConfig(), HEAD)
    model.activate("a")
    after = hidden(model.encoder, batch)
    assert 0 < (after - before).abs().max().item() < 1e-4


def test_parameter_counts_follow_the_paper(base):
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(bottleneck=8), HEAD)
    d, m = 32, 8
    counts = model.parameter_counts("a")
    assert adapter_param_count(d, m) == 2 * m * d + d + m == 552
    assert counts["adapters"] == 2 * 2 * 552  # 2 layers x 2 placements
    assert counts["layernorm"] == (2 * 2 + 1) * 2 * d  # 4 in layers + embeddings, gamma and beta
    assert counts["head"] == d * d + d + 2 * d + 2
    assert counts["base"] == sum(p.numel() for n, p in model.encoder.named_parameters()
                                 if ".adapters." not in n and ".deltas." not in n)


def test_training_one_adapter_leaves_base_and_others_bit_identical(base, batch):
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(bottleneck=4), HEAD)
    model.add_adapter("b", HoulsbyConfig(bottleneck=4), HEAD)
    base_before = {k: v.clone() for k, v in model.encoder.state_dict().items()
                   if ".adapters." not in k and ".deltas." not in k}
    b_before = model.adapter_state_dict("b")
    a_before = model.adapter_state_dict("a")
    model.activate("a")
    opt = torch.optim.AdamW(model.trainable_parameters("a"), lr=1e-2)
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(**batch), torch.tensor([1, 0]))
        loss.backward()
        opt.step()
        opt.zero_grad()
    for k, v in model.encoder.state_dict().items():
        if k in base_before:
            assert torch.equal(v, base_before[k]), k
    assert all(torch.equal(v, b_before[k]) for k, v in model.adapter_state_dict("b").items())
    changed = [k for k, v in model.adapter_state_dict("a").items() if not torch.equal(v, a_before[k])]
    assert any(k.startswith("layernorm.") for k in changed)
    assert any(k.startswith("adapters.") for k in changed)


def test_base_weights_get_no_gradients(base, batch):
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(bottleneck=4), HEAD)
    model.activate("a")
    torch.nn.functional.cross_entropy(model(**batch), torch.tensor([1, 0])).backward()
    own = {id(p) for p in model.trainable_parameters("a")}
    assert all(p.grad is None for p in model.parameters() if id(p) not in own)


def test_layernorm_delta_shifts_gamma_and_beta(base, batch):
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(bottleneck=4, init_scale=0.0), HEAD)
    site = model.layernorm_sites["layers.0.ffn_output"]
    with torch.no_grad():
        site.deltas["a"].weight_delta.fill_(0.5)
        site.deltas["a"].bias_delta.fill_(-0.25)
    x = torch.randn(2, 3, 32)
    site.active = "a"
    ln = site.base_layer
    expected = torch.nn.functional.layer_norm(x, (32,), ln.weight + 0.5, ln.bias - 0.25, ln.eps)
    assert torch.allclose(site(x), expected)


@pytest.mark.parametrize("layernorm, deltas", [
    ("delta", {"layers.0.attention_output", "layers.0.ffn_output", "layers.1.attention_output",
               "layers.1.ffn_output", "embeddings"}),
    ("own-layers", {"layers.1.attention_output", "layers.1.ffn_output"}),
    ("frozen", set())])
def test_tensor_names_match_the_torch_free_spec(base, layernorm, deltas):
    model = AdapterModel(base.encoder)
    config = HoulsbyConfig(bottleneck=4, layers=(1,), layernorm=layernorm)
    model.add_adapter("a", config, HEAD)
    manifest = {"base_model": {"hidden_size": 32, "num_layers": 2},
                "architecture": config.to_manifest(2), "head": HEAD.to_manifest()}
    assert manifest["architecture"]["layernorm"] == layernorm
    actual = {k: tuple(v.shape) for k, v in model.adapter_state_dict("a").items()}
    assert actual == expected_tensors(manifest)
    assert not any(k.startswith("adapters.0.") for k in actual)
    assert {k[len("layernorm."):].rsplit(".", 1)[0] for k in actual
            if k.startswith("layernorm.")} == deltas


def test_named_adapter_management_errors(base):
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(bottleneck=4), HEAD)
    with pytest.raises(AdapterError, match="already loaded"):
        model.add_adapter("a", HoulsbyConfig(bottleneck=4), HEAD)
    model.remove_adapter("a")
    with pytest.raises(AdapterError, match="no adapter named 'a'"):
        model.activate("a")
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        model.add_adapter("b", HoulsbyConfig(layers=(5,)), HEAD)


def test_unsupported_model_type_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(UnsupportedModelError, match="'gpt2' is not supported") as err:
        load_base(str(tmp_path))
    assert "bert" in err.value.hint


@pytest.mark.parametrize("model_type", ["roberta", "electra"])
def test_other_bert_shaped_encoders_get_adapters(model_type, tmp_path, tokenizer):
    """RoBERTa and ELECTRA (whose embeddings are narrower than its hidden size) via the table."""
    from transformers import AutoConfig, AutoModel

    extra = {"embedding_size": 16} if model_type == "electra" else {}
    config = AutoConfig.for_model(model_type, vocab_size=30522, hidden_size=32,
                                  num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=130, **extra)
    AutoModel.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    base = load_base(str(tmp_path))
    model = AdapterModel(base.encoder)
    model.add_adapter("a", HoulsbyConfig(bottleneck=4), HEAD)
    model.activate("a")
    batch = dict(base.tokenizer(["a film"], return_tensors="pt"))
    batch.pop("token_type_ids")
    assert model(**batch).shape == (1, 2)
    manifest = {"base_model": base.info.to_manifest(), "head": HEAD.to_manifest(),
                "architecture": HoulsbyConfig(bottleneck=4).to_manifest(2)}
    actual = {k: tuple(v.shape) for k, v in model.adapter_state_dict("a").items()}
    assert actual == expected_tensors(manifest)
    if model_type == "electra":
        assert actual["layernorm.embeddings.weight_delta"] == (16,)


def test_a_head_added_to_a_half_model_is_in_its_dtype(base, batch):
    """A model made bf16 (`.to(torch.bfloat16)`) adds heads in bf16, as it adds adapters:
    a float32 head crashed every pass (mat1 and mat2 dtypes)."""
    from hubcli.core.composition import Fuse

    seq = HeadConfig("sequence_classification", 2, ("neg", "pos"))
    model = AdapterModel(base.encoder).to(torch.bfloat16).eval()
    for name in ("a", "b"):
        model.add_adapter(name, HoulsbyConfig(bottleneck=4), seq)
    fusion = model.add_fusion(Fuse("a", "b"), seq)
    with torch.inference_mode():
        for name in ("a", fusion):
            model.activate(name)
            assert model(**batch).dtype == torch.bfloat16
        _, logits = model.forward_routed(**batch, per_row=["a"] * len(batch["input_ids"]))
    assert {row.dtype for row in logits} == {torch.bfloat16}
