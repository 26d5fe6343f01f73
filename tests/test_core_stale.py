"""Weights an optimizer steps behind what inference keeps from them (a gathered site's stacks,
a fusion's fold): a fused step writes in place without bumping version counters, which is how
a kept stack knows its weights changed (`gathered._bump_versions_after_fused_step`)."""

from __future__ import annotations

import torch
from test_core_routing import SEQ, TEXTS, _randomise, alone, encode

from hubcli.core.composition import Fuse
from hubcli.core.config import HoulsbyConfig
from hubcli.core.model import AdapterModel


def _fused_step(model: AdapterModel, name: str, batch: dict) -> None:
    """One fused AdamW step on `name`'s weights (the trainer's optimizer), which writes them
    in place without a version bump of its own; `name` is the active adapter (activating
    drops a fusion's kept fold)."""
    opt = torch.optim.AdamW(model.trainable_parameters(name), lr=0.5, fused=True)
    model.train()
    model(**batch).sum().backward()
    opt.step()
    model.eval()


def test_a_fused_optimizer_step_leaves_no_stale_stack(base):
    """Kept stacks (sites, LayerNorm tables, heads) are rebuilt after a fused step: the
    routed row equals the stepped adapter alone (a stale stack missed it by ~4)."""
    model = AdapterModel(base.encoder)
    model.gather = True
    for k, name in enumerate(("a", "c")):
        model.add_adapter(name, HoulsbyConfig(bottleneck=4), SEQ)
        _randomise(model, name, k)
    model.eval()
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        model.forward_routed(**batch, per_row=["a", "c"])  # the stacks are kept
    model.activate("a")
    _fused_step(model, "a", batch)
    with torch.inference_mode():
        _, logits = model.forward_routed(**batch, per_row=["a", "c"])
        expected = alone(model, base.tokenizer, TEXTS[0], "a")
    assert torch.allclose(logits[0], expected, atol=1e-5, rtol=0)


def test_a_fused_optimizer_step_refolds_a_fusion(base):
    """A fusion evaluated without gradients (its folded matrices kept) after a fused step of
    its training equals its pass with gradients, on the live weights: `hub fuse` scored each
    evaluation after the first with the first's query and key."""
    model = AdapterModel(base.encoder)
    for k, name in enumerate(("a", "c")):
        model.add_adapter(name, HoulsbyConfig(bottleneck=4), SEQ)
        _randomise(model, name, k)
    fusion = model.add_fusion(Fuse("a", "c"), SEQ)
    model.eval()
    batch = encode(base.tokenizer, TEXTS[:3])
    model.activate(fusion)
    with torch.inference_mode():
        model(**batch)  # an evaluation: the fold is kept
    _fused_step(model, fusion, batch)
    with torch.inference_mode():
        evaluated = model(**batch)
    assert torch.allclose(evaluated, model(**batch).detach(), atol=1e-6, rtol=0)
