"""The Houlsby method's other forms (`reads`/`skip`: Pfeiffer's after the LayerNorm, the
parallel adapter reading the sublayer's input): the same on either encoder, routed in a mixed
batch as each row alone, trained, recorded in the manifest, and mixed by AdapterFusion.
That each form computes what the `adapters` library computes is tests/test_interop_import.py's
(fixtures written by that library)."""

from __future__ import annotations

import pytest
import torch
from test_core_bert import HEAD, _config, _transformers_bert
from test_core_routing import SEQ, TEXTS, _randomise, alone, encode

from hubcli.base.load import load_encoder
from hubcli.core.composition import Fuse, Stack
from hubcli.core.config import HoulsbyConfig, LoraConfig
from hubcli.core.model import AdapterModel
from hubcli.core.routing import BASE

FORMS = [("normed", "output"), ("normed", "normed"), ("normed", "sum"), ("input", "output")]


@pytest.fixture()
def model(base):
    model = AdapterModel(base.encoder)
    model.eval()
    return model


@pytest.mark.parametrize("reads, skip", FORMS)
def test_each_form_gives_the_same_logits_on_either_encoder(reads, skip, tiny_base_dir, batch):
    logits = []
    for encoder in (load_encoder(tiny_base_dir, _config(tiny_base_dir)),
                    _transformers_bert(tiny_base_dir)):
        model = AdapterModel(encoder)
        model.add_adapter("x", HoulsbyConfig(bottleneck=8, reads=reads, skip=skip), HEAD)
        _randomise(model, "x", seed=5)
        model.activate("x")
        model.eval()
        with torch.no_grad():
            logits.append(model(**batch))
    assert (logits[0] - logits[1]).abs().max().item() <= 1e-5


def test_the_forms_differ_from_houlsbys_and_from_each_other(model, base):
    batch = encode(base.tokenizer, TEXTS[:3])
    out = []
    for k, (reads, skip) in enumerate([("output", "output"), *FORMS]):
        model.add_adapter(f"f{k}", HoulsbyConfig(bottleneck=8, reads=reads, skip=skip), SEQ)
        _randomise(model, f"f{k}", seed=1)  # the same weights: only the form differs
        model.activate(f"f{k}")
        with torch.no_grad():
            out.append(model(**batch))
    for i in range(len(out)):
        for j in range(i):
            assert (out[i] - out[j]).abs().max().item() > 1e-3, (i, j)


def test_a_mixed_batch_of_every_form_matches_each_row_alone(model, base):
    names = []
    for k, (reads, skip) in enumerate([("output", "output"), *FORMS]):
        # LayerNorm deltas: a form that reads past the LayerNorm sees its own rows' deltas
        config = HoulsbyConfig(bottleneck=4 + k, reads=reads, skip=skip,
                               placement=("ffn_output",) if k == 2 else
                               ("attention_output", "ffn_output"))
        model.add_adapter(f"form{k}", config, SEQ)
        _randomise(model, f"form{k}", seed=20 + k)
        names.append(f"form{k}")
    model.add_adapter("lora", LoraConfig(rank=4), SEQ)
    _randomise(model, "lora", seed=30)
    per_row = [names[1], BASE, names[0], names[2], "lora", names[3], names[4], names[1],
               names[4], BASE, names[0], names[3]]
    batch = encode(base.tokenizer, TEXTS)
    assert not batch["attention_mask"].all()  # padded: the packed path
    with torch.inference_mode():
        hidden, logits = model.forward_routed(**batch, per_row=per_row)
        for i, (text, name) in enumerate(zip(TEXTS, per_row)):
            expected = alone(model, base.tokenizer, text, name)
            got = hidden[i][:int(batch["attention_mask"][i].sum())] if name == BASE else logits[i]
            assert torch.allclose(got, expected, atol=1e-5, rtol=0), (i, name)


def test_a_form_trains_its_bottleneck_and_layernorm_deltas_only(model, base):
    untouched = {k: v.clone() for k, v in base.encoder.state_dict().items()}  # wrapped, no adapter
    torch.manual_seed(0)  # the adapter's init and the dropout, whatever ran before
    model.add_adapter("p", HoulsbyConfig(bottleneck=8, reads="normed", init_scale=0.05), SEQ)
    model.activate("p")
    model.train()
    batch = encode(base.tokenizer, TEXTS[:8])
    labels = torch.tensor([1, 0, 0, 1, 0, 1, 1, 0])
    params = model.trainable_parameters("p")
    opt = torch.optim.AdamW(params, lr=1e-2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(**batch), labels)
        opt.zero_grad()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    assert losses[-1] < 0.5 * losses[0]
    tensors = model.named_adapter_tensors("p")
    assert any(v.abs().max() > 0 for k, v in tensors.items() if k.startswith("layernorm."))
    after = base.encoder.state_dict()
    assert all(torch.equal(after[k], v) for k, v in untouched.items())  # the frozen base


def test_the_form_round_trips_through_the_manifest_and_houlsbys_is_not_written():
    config = HoulsbyConfig(bottleneck=4, layers=(0, 1), reads="normed", skip="sum")
    arch = config.to_manifest(2)
    assert (arch["reads"], arch["skip"]) == ("normed", "sum")
    assert HoulsbyConfig.from_manifest(arch) == config
    plain = HoulsbyConfig(bottleneck=4).to_manifest(2)
    assert "reads" not in plain and "skip" not in plain
    assert HoulsbyConfig.from_manifest(plain) == HoulsbyConfig(bottleneck=4, layers=(0, 1))
    with pytest.raises(ValueError, match="unknown reads 'after'; choose from output, sum, "
                                         "normed, input"):
        HoulsbyConfig(reads="after")


def test_a_fusion_mixes_forms_and_stacking_works(model, base):
    model.add_adapter("h", HoulsbyConfig(bottleneck=4), SEQ)
    model.add_adapter("pf", HoulsbyConfig(bottleneck=4, reads="normed"), SEQ)
    _randomise(model, "h", seed=1)
    _randomise(model, "pf", seed=2)
    batch = encode(base.tokenizer, TEXTS[:2])
    # one component's fusion, with its LayerNorm deltas, computes what that component does:
    # pf reads the LayerNorm with the fusion's deltas, started at its own
    alone_pf = _encode(model, "pf", batch)
    one = Fuse("pf", "pf")
    model.add_fusion(one, SEQ, train_layernorm=True)
    assert torch.allclose(_encode(model, one, batch), alone_pf, atol=1e-5, rtol=0)
    mixed = Fuse("h", "pf")
    model.add_fusion(mixed, SEQ, train_layernorm=True)
    with torch.no_grad():
        folded = _encode(model, mixed, batch)  # no fold for pf: its outputs are stacked
    assert torch.allclose(folded, model.encode(**batch), atol=1e-5, rtol=0)
    assert (folded - alone_pf).abs().max().item() > 1e-3 and not any(
        s.fusions[mixed.name]._fold.kept for s in model.adapter_sites.values()
        if mixed.name in s.fusions)
    stacked = _encode(model, Stack("h", "pf"), batch)
    assert (stacked - alone_pf).abs().max().item() > 1e-3  # h's output reaches pf


def _encode(model, block, batch) -> torch.Tensor:
    model.activate(block)
    with torch.no_grad():
        return model.encode(**batch)