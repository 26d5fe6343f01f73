"""The compact BERT encoder against transformers' BertModel, and the CPU dropout it uses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from hubcli.core import ops
from hubcli.base.load import load_encoder
from hubcli.core.bert import CompactBert, supports
from hubcli.core.config import HoulsbyConfig
from hubcli.core.heads import HeadConfig
from hubcli.core.model import AdapterModel
from hubcli.errors import ModelError

HEAD = HeadConfig("sequence_classification", 3, ("a", "b", "c"))
TEXTS = ["a gripping, beautifully acted film", "dull", "the cat sat on the mat [SEP] again"]


def _config(path) -> dict:
    return json.loads((path / "config.json").read_text())


def _transformers_bert(path):
    from transformers import BertModel

    return BertModel.from_pretrained(path, attn_implementation="sdpa").eval()


@pytest.fixture()
def batch(tokenizer):
    enc = tokenizer(TEXTS[:2], TEXTS[1:], padding=True, return_tensors="pt")
    assert not enc["attention_mask"].all() and enc["token_type_ids"].any()  # padding, 2 segments
    return dict(enc)


def _real_tokens(hidden, batch):
    return hidden[batch["attention_mask"].bool()]


def test_matches_transformers_bert_in_eval(tiny_base_dir, batch):
    ours = load_encoder(tiny_base_dir, _config(tiny_base_dir))
    assert isinstance(ours, CompactBert)
    with torch.no_grad():
        diff = (_real_tokens(ours(**batch).last_hidden_state, batch)
                - _real_tokens(_transformers_bert(tiny_base_dir)(**batch).last_hidden_state, batch))
    assert diff.abs().max().item() <= 1e-6


@pytest.mark.parametrize("act", sorted(ops.ACTIVATION_FUNCTIONS))
def test_every_activation_in_the_one_table_matches_transformers(tmp_path, tiny_base_dir, batch,
                                                                act):
    """The table serves BERT's hidden_act too: under each name, transformers computes the same."""
    for f in ("model.safetensors", "config.json"):
        (tmp_path / f).write_bytes((tiny_base_dir / f).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({**_config(tiny_base_dir), "hidden_act": act}))
    ours = load_encoder(tmp_path, _config(tmp_path))
    assert isinstance(ours, CompactBert)
    with torch.no_grad():
        diff = (_real_tokens(ours(**batch).last_hidden_state, batch)
                - _real_tokens(_transformers_bert(tmp_path)(**batch).last_hidden_state, batch))
    assert diff.abs().max().item() <= 1e-6


def test_the_activation_table_covers_the_schemas_words():
    from hubcli.format.vocab import ACTIVATIONS

    assert set(ACTIVATIONS) <= set(ops.ACTIVATION_FUNCTIONS)


def test_same_adapter_gives_same_logits_on_either_encoder(tiny_base_dir, batch):
    logits = []
    for encoder in (load_encoder(tiny_base_dir, _config(tiny_base_dir)),
                    _transformers_bert(tiny_base_dir)):
        model = AdapterModel(encoder)
        torch.manual_seed(3)
        model.add_adapter("x", HoulsbyConfig(bottleneck=8, init_scale=0.1), HEAD)
        model.activate("x")
        with torch.no_grad():
            logits.append(model(**batch))
    assert (logits[0] - logits[1]).abs().max().item() <= 1e-6


def test_hand_written_training_attention_matches_sdpa(tiny_base_dir, batch):
    model = CompactBert.from_pretrained(tiny_base_dir, _config(tiny_base_dir))
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
        model.train()
        for m in model.modules():
            if hasattr(m, "p"):
                # p > 0 keeps the training path; a threshold of 0 in 2^16 drops nothing
                m.p = 1e-9 if m.__class__.__name__ == "BertSelfAttention" else 0.0
        got = model(**batch).last_hidden_state
    diff = _real_tokens(got, batch) - _real_tokens(expected, batch)
    assert diff.abs().max().item() <= 1e-5


def test_training_mode_applies_dropout_reproducibly(tiny_base_dir, batch):
    model = CompactBert.from_pretrained(tiny_base_dir, _config(tiny_base_dir)).train()
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        runs.append(model(**batch).last_hidden_state)
    assert torch.equal(runs[0], runs[1])
    with torch.no_grad():
        assert not torch.allclose(runs[0], model.eval()(**batch).last_hidden_state)


def test_checkpoint_of_a_task_model_loads_its_bert_prefix(tmp_path, tiny_base_dir, batch):
    tensors = load_file(str(tiny_base_dir / "model.safetensors"))
    prefixed = {f"bert.{k}": v for k, v in tensors.items()}
    prefixed["cls.predictions.bias"] = torch.zeros(3)  # a task head the encoder ignores
    save_file(prefixed, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny_base_dir / "config.json").read_text())
    a = CompactBert.from_pretrained(tmp_path, _config(tmp_path))
    b = CompactBert.from_pretrained(tiny_base_dir, _config(tiny_base_dir))
    with torch.no_grad():
        assert torch.equal(a(**batch).last_hidden_state, b(**batch).last_hidden_state)


def test_missing_tensor_is_named(tmp_path, tiny_base_dir):
    tensors = load_file(str(tiny_base_dir / "model.safetensors"))
    del tensors["encoder.layer.1.output.dense.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny_base_dir / "config.json").read_text())
    with pytest.raises(ModelError, match=r"encoder\.layer\.1\.output\.dense\.weight"):
        load_encoder(tmp_path, _config(tmp_path))


@pytest.mark.parametrize("change", [{"position_embedding_type": "relative_key"},
                                    {"hidden_act": "gelu_new"}, {"is_decoder": True},
                                    {"model_type": "roberta"}])
def test_what_it_does_not_cover_goes_to_transformers(tiny_base_dir, change):
    config = {**_config(tiny_base_dir), **change}
    assert not supports(config, tiny_base_dir)
    assert supports(_config(tiny_base_dir), tiny_base_dir)


def test_relative_positions_load_through_transformers(tmp_path, tiny_base_dir):
    (tmp_path / "model.safetensors").write_bytes((tiny_base_dir / "model.safetensors").read_bytes())
    config = {**_config(tiny_base_dir), "position_embedding_type": "relative_key"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    encoder = load_encoder(tmp_path, config)
    assert type(encoder).__name__ == "BertModel"
    assert encoder.config.position_embedding_type == "relative_key"


def test_saved_folder_reads_back_in_transformers(tmp_path, tiny_base_dir, batch):
    ours = CompactBert.from_pretrained(tiny_base_dir, _config(tiny_base_dir))
    ours.save_pretrained(tmp_path)
    with torch.no_grad():
        diff = (_real_tokens(_transformers_bert(tmp_path)(**batch).last_hidden_state, batch)
                - _real_tokens(ours(**batch).last_hidden_state, batch))
    assert diff.abs().max().item() <= 1e-6


def test_predicting_never_imports_transformers_modelling_code(tiny_base_dir):
    code = ("import sys; from hubcli.base.load import load_base; b = load_base(sys.argv[1]); "
            "b.encoder(**b.tokenizer(['hi there'], return_tensors='pt')); "
            "print(sorted(m for m in ('transformers.modeling_utils', 'torch._dynamo', "
            "'transformers.models.bert.modeling_bert') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tiny_base_dir)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_keep_mask_rate_and_dropout_scaling():
    torch.manual_seed(0)
    mask = ops.keep_mask(torch.Size([1000, 1000]), 0.1, torch.device("cpu"))
    assert mask.dtype == torch.bool and mask.shape == (1000, 1000)
    assert abs(mask.float().mean().item() - 0.9) < 0.002
    x = torch.ones(200, 500, requires_grad=True)
    y = ops.dropout(x, 0.25, True)
    assert y.unique().tolist() == pytest.approx([0.0, 1 / 0.75])
    assert abs((y == 0).float().mean().item() - 0.25) < 0.01
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d(x * scale)/dx is the scale itself
    assert ops.dropout(x, 0.25, False) is x
    assert ops.dropout(x, 1.0, True).abs().sum().item() == 0
