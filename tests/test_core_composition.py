"""Composition blocks: Stack, Parallel and Fuse over loaded adapters, and what training them
may touch."""

from __future__ import annotations

import pytest
import torch
from test_core_routing import SEQ, TEXTS, _randomise, alone, encode

from hubcli.core.composition import Fuse, Parallel, Stack
from hubcli.core.config import HoulsbyConfig, LoraConfig
from hubcli.core.heads import HeadConfig
from hubcli.core.model import AdapterModel
from hubcli.core.routing import BASE
from hubcli.errors import AdapterError

TAGS = HeadConfig("token_classification", 3, ("O", "B", "I"))


@pytest.fixture()
def model(base):
    model = AdapterModel(base.encoder)
    for k, (name, config, head) in enumerate([("a", HoulsbyConfig(bottleneck=8), SEQ),
                                              ("b", HoulsbyConfig(bottleneck=4), TAGS),
                                              ("c", LoraConfig(rank=4), SEQ)]):
        model.add_adapter(name, config, head)
        _randomise(model, name, seed=k)
    model.eval()
    return model


@pytest.mark.parametrize("gather", [False, True], ids=["each", "batched"])
def test_parallel_equals_running_each_adapter_separately(model, base, gather):
    """Each adapter on its own pass, or all three as one gathered batch of copies (what a
    GPU runs by default): either way each equals that adapter alone."""
    batch = encode(base.tokenizer, TEXTS[:5])
    model.gather = gather
    with torch.inference_mode():
        together = model.forward_parallel(**batch, block=Parallel("a", "b", "c"))
        # where a GPU's results go to the CPU: moved as they come out, shapes kept
        moved = model.forward_parallel(**batch, block=Parallel("a", "b", "c"), logits_to="meta")
        for name in ("a", "b", "c"):
            model.activate(name)
            alone = model(**batch)
            assert together[name].shape == alone.shape
            assert torch.allclose(together[name], alone, atol=1e-5, rtol=0), name
            assert moved[name].device.type == "meta" and moved[name].shape == alone.shape


@pytest.mark.parametrize("gather", [False, True], ids=["each", "batched"])
@pytest.mark.parametrize("texts", [TEXTS[:5], ["same length", "also same"]],
                         ids=["padded", "unpadded"])
def test_parallel_runs_the_layers_below_its_adapters_once(model, base, texts, gather):
    """Adapters that leave layer 0 out (no adapter, no LayerNorm delta there; AdapterDrop):
    layer 0 runs once over the batch, not once per adapter, and every output still equals
    that adapter's own pass. Batched, layer 1 runs once over both copies of its output."""
    model.add_adapter("up1", HoulsbyConfig(bottleneck=8, layers=(1,), layernorm="own-layers"), SEQ)
    model.add_adapter("up2", LoraConfig(rank=4, layers=(1,)), TAGS)
    for k, name in enumerate(("up1", "up2")):
        _randomise(model, name, seed=10 + k)
    assert model.first_layer_acting(["up1", "up2"]) == 1
    assert model.first_layer_acting(["up2", "c"]) == 0  # LoRA "c" has layer 0
    assert model.first_layer_acting(["up1", "a"]) is None  # "a" has embedding deltas
    batch = encode(base.tokenizer, texts)
    rows = {}
    for i, layer in enumerate(model.encoder.encoder.layer):
        layer.register_forward_hook(lambda _m, _a, out, i=i: rows.setdefault(i, []).append(
            out.shape[0]))
    with torch.inference_mode():
        model.gather = gather
        together = model.forward_parallel(**batch, block=Parallel("up1", "up2"))
        model.gather = False
        mask = batch["attention_mask"]
        once = len(texts) if bool(mask.all()) else int(mask.sum())  # rows, or packed tokens
        assert rows == {0: [once], 1: [2 * once] if gather else [once, once]}
        for name in ("up1", "up2"):
            model.activate(name)
            alone = model(**batch)
            assert torch.allclose(together[name], alone, atol=1e-5, rtol=0), name


def test_stack_applies_the_second_adapter_on_the_firsts_output(model, base):
    site = model.adapter_sites[(0, "ffn_output")]
    x = torch.randn(2, 3, 64)
    with torch.no_grad():
        y = site.base_layer(x)
        expected = site.adapters["b"](x, site.adapters["a"](x, y))
        model.activate(Stack("a", "b"))
        assert torch.equal(site(x), expected)
    assert model.active == "b"  # the top adapter's head and LayerNorm deltas
    assert model.layernorm_sites["embeddings"].active == "b"


def test_an_identity_adapter_stacked_with_its_layernorms_started_below_equals_the_one_below(
        model, base):
    """A stacked adapter runs with its own LayerNorm deltas; started at those of the adapter
    below ("a", trained with its own), a fresh stack computes what "a" alone does."""
    batch = encode(base.tokenizer, TEXTS[:3])
    model.add_adapter("top", HoulsbyConfig(bottleneck=4, init_scale=0.0), SEQ)
    with torch.no_grad():
        model.activate("a")
        below = model.encode(**batch)
        model.activate(Stack("a", "top"))
        fresh = model.encode(**batch)  # the base's LayerNorms under "a": not what "a" computes
        model.start_layernorm_at("top", ["a"])
        started = model.encode(**batch)
    assert not torch.allclose(fresh, below, atol=1e-3)
    assert torch.allclose(started, below, atol=1e-6, rtol=0)


def test_a_fresh_fusion_of_one_adapter_equals_that_adapter(model, base):
    """V = identity and a softmax over a single output: the fusion passes it through."""
    batch = encode(base.tokenizer, TEXTS[:3])
    fused = Fuse("a", "a")
    model.add_fusion(fused, SEQ)
    with torch.no_grad():
        model.activate(fused)
        hidden = model.encode(**batch)
        model.activate("a")
        for site in model.layernorm_sites.values():  # a Fuse keeps the base LayerNorms
            site.active = None
        expected = model.encode(**batch)
    assert torch.allclose(hidden, expected, atol=1e-5, rtol=0)


def test_fusion_weights_adapter_outputs_by_attention_with_identity_values(model):
    fused = Fuse("a", "b")
    model.add_fusion(fused, SEQ)
    site = model.adapter_sites[(1, "attention_output")]
    fusion = site.fusions[fused.name]
    assert torch.equal(fusion.value.weight, torch.eye(32))
    x = torch.randn(2, 3, 32)

    def by_definition():
        y = site.base_layer(x)
        outs = torch.stack([site.adapters[n](x, y) for n in ("a", "b")])
        scores = torch.stack([(fusion.query(y) * fusion.key(o)).sum(-1) for o in outs], -1)
        w = scores.softmax(-1)
        return fusion.value(w[..., 0:1] * outs[0] + w[..., 1:2] * outs[1])

    model.activate(fused)
    with torch.no_grad():
        assert torch.allclose(site(x), by_definition(), atol=1e-6)
        # the folded query-key product kept between no-grad calls follows a weight change
        fusion.query.weight.add_(torch.randn(32, 32) * 0.5)
        fusion.value.weight.mul_(0.5)
        assert torch.allclose(site(x), by_definition(), atol=1e-5)
    assert torch.allclose(site(x), by_definition(), atol=1e-5)  # with gradients, unfolded


@pytest.mark.parametrize("children", [("a", "b", "d"), ("a", "c")])
def test_fused_inference_equals_the_fusion_by_definition(model, batch, children):
    """Without gradients a Fuse of Houlsby adapters takes the folded path (no K outputs);
    with a LoRA child, or with gradients, the outputs are stacked. All give the same."""
    model.add_adapter("d", HoulsbyConfig(bottleneck=16), SEQ)
    _randomise(model, "d", seed=7)
    fused = Fuse(*children)
    model.add_fusion(fused, SEQ)
    sites = [s.fusions[fused.name] for s in model.adapter_sites.values()
             if fused.name in s.fusions]
    with torch.no_grad():  # a trained fusion, not the identity start
        for p in (p for f in sites for p in f.parameters()):
            p.add_(torch.randn_like(p) * 0.3)
    model.activate(fused)
    with torch.no_grad():
        folded = model.encode(**batch)
    stacked = model.encode(**batch)  # gradients on: the outputs are stacked
    assert sites and all(bool(f._fold.kept) == ("c" not in children) for f in sites)
    assert torch.allclose(folded, stacked, atol=1e-5, rtol=0)
    assert (folded - stacked).abs().max() > 0 or "c" in children  # two ways, not one


def test_a_component_loaded_again_is_fused_with_its_new_weights(model, batch):
    """A server unloads an adapter a fusion uses and loads it again (new weights): the
    folded matrices kept for the fusion are rebuilt from the new ones, and nothing kept
    holds the old adapter's tensors."""
    import gc
    import weakref

    fused = Fuse("a", "b")
    model.add_fusion(fused, SEQ)
    model.activate(fused)
    old = [weakref.ref(p) for p in model.named_adapter_tensors("b").values()]
    with torch.no_grad():
        before = model.encode(**batch)
        model.remove_adapter("b")
        gc.collect()
        assert [r for r in old if r() is not None] == []
        model.add_adapter("b", HoulsbyConfig(bottleneck=4), TAGS)
        _randomise(model, "b", seed=99)
        model.activate(fused)
        folded = model.encode(**batch)
    stacked = model.encode(**batch)  # gradients on: nothing kept, by definition
    assert (folded - before).abs().max() > 1e-3
    assert torch.allclose(folded, stacked, atol=1e-5, rtol=0)


def test_replaced_weights_are_fused_at_once(model, batch):
    """`load_state_dict(assign=True)` on a fusion and its components writes nothing in
    place: the fold kept from the old Parameters must not survive it."""
    fused = Fuse("a", "b")
    model.add_fusion(fused, SEQ)
    model.activate(fused)
    gen = torch.Generator().manual_seed(3)
    sites = [s for s in model.adapter_sites.values() if fused.name in s.fusions]
    with torch.no_grad():
        before = model.encode(**batch)
        for module in [m for s in sites for m in (s.fusions[fused.name], s.adapters["a"])]:
            module.load_state_dict({k: v + torch.randn(v.shape, generator=gen) * 0.3
                                    for k, v in module.state_dict().items()}, assign=True)
        folded = model.encode(**batch)
    stacked = model.encode(**batch)
    assert (folded - before).abs().max() > 1e-3
    assert torch.allclose(folded, stacked, atol=1e-5, rtol=0)


@pytest.mark.parametrize("children", [("a", "b"), ("a", "c")], ids=["folded", "stacked"])
def test_a_fuse_runs_under_autocast_and_keeps_nothing_of_it(model, batch, children):
    """Without gradients a Fuse keeps products of its weights (folded with Houlsby children,
    the query-key product with any). Under bf16 autocast it runs, to bf16's precision; a
    float32 pass after it gets float32 results, not what the autocast pass kept."""
    fused = Fuse(*children)
    model.add_fusion(fused, SEQ)
    model.activate(fused)
    gen = torch.Generator().manual_seed(4)
    fusions = [s.fusions[fused.name] for s in model.adapter_sites.values()
               if fused.name in s.fusions]
    with torch.no_grad():  # a trained fusion, not the identity start
        for p in (p for f in fusions for p in f.parameters()):
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model.encode(**batch)
        after = model.encode(**batch)
    exact = model.encode(**batch)  # gradients on: nothing kept, by definition
    assert 0 < (low - exact).abs().max() < 0.1  # bf16 products ran, to their precision
    assert torch.allclose(after, exact, atol=1e-5, rtol=0)


def _train(model, trained: str, block, batch, steps: int = 2) -> None:
    params = model.trainable_parameters(trained)
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    model.train()
    model.activate(block)
    opt = torch.optim.AdamW(params, lr=1e-2)
    own = {id(p) for p in params}
    for _ in range(steps):
        torch.nn.functional.cross_entropy(model(**batch), torch.tensor([1, 0])).backward()
        assert all(p.grad is None for p in model.parameters() if id(p) not in own)
        assert all(p.grad is not None for p in params)
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("what", ["adapter", "fusion", "stacked"])
def test_training_touches_only_what_is_trained(model, base, what):
    batch = encode(base.tokenizer, TEXTS[:2])
    fused = Fuse("a", "b", "c")
    model.add_fusion(fused, SEQ)
    trained, block = {"adapter": ("c", "c"), "fusion": (fused.name, fused),
                      "stacked": ("c", Stack("a", "c"))}[what]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trained_keys = {id(p) for p in model.trainable_parameters(trained)}
    _train(model, trained, block, batch)
    after = dict(model.named_parameters())
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed  # the trained part moved ...
    assert all(id(after[k]) in trained_keys for k in changed)  # ... and nothing else did


def test_parallel_cannot_be_activated_and_fusions_need_loaded_adapters(model, base):
    with pytest.raises(AdapterError, match="cannot be activated"):
        model.activate(Parallel("a", "b"))
    with pytest.raises(AdapterError, match="no adapter named 'zz'"):
        model.add_fusion(Fuse("a", "zz"), SEQ)
    with pytest.raises(AdapterError, match=r"no fusion Fuse\(a, b\) is loaded") as refused:
        model.activate(Fuse("a", "b"))
    assert refused.value.hint.startswith("train one with hub fuse --adapters a,b")
    with pytest.raises(ValueError, match="at least two"):
        Parallel("a")


def test_a_fusion_owning_layernorm_deltas_starts_from_its_components(model, base):
    """Deltas start at the components' mean, so a fusion of one adapter (with its deltas)
    computes what that adapter computes, LayerNorms included."""
    batch = encode(base.tokenizer, TEXTS[:3])
    fused = Fuse("a", "a")
    model.add_fusion(fused, SEQ, train_layernorm=True)
    delta = model.layernorm_sites["embeddings"].deltas
    assert torch.equal(delta[fused.name].weight_delta, delta["a"].weight_delta)
    assert delta["a"].weight_delta.abs().sum() > 0  # randomised: the check is not vacuous
    with torch.no_grad():
        model.activate(fused)
        hidden = model.encode(**batch)
        model.activate("a")
        expected = model.encode(**batch)
    assert torch.allclose(hidden, expected, atol=1e-5, rtol=0)


def test_a_named_composition_activates_by_name(model, base):
    batch = encode(base.tokenizer, TEXTS[:2])
    model.add_adapter("top", HoulsbyConfig(bottleneck=4), SEQ)
    _randomise(model, "top", seed=9)
    model.name_composition("top", Stack("a", "top"))
    with pytest.raises(AdapterError, match="a composition is a Stack or Fuse, not 'a'"):
        model.name_composition("x", "a")  # it was taken, and routed "x" as an adapter
    with torch.no_grad():
        model.activate("top")
        by_name = model(**batch)
        model.activate(Stack("a", "top"))
        assert torch.equal(by_name, model(**batch))
    fused = Fuse("a", "b")
    model.add_fusion(fused, SEQ, sites=[(0, "ffn_output")])
    assert [k for k, s in model.adapter_sites.items() if fused.name in s.fusions] == [
        (0, "ffn_output")]
    model.name_composition("ab", fused)
    model.remove_adapter("ab")  # the fusion's own parameters go, its components stay
    assert fused.name not in model.infos and {"a", "b"} <= set(model.infos)
    with pytest.raises(AdapterError, match="no adapter site at layer 7"):
        model.add_fusion(fused, SEQ, sites=[(7, "ffn_output")])


def test_a_fusion_activates_by_the_name_add_fusion_returns(model, base):
    """`activate(add_fusion(...))` runs the fusion, as activating its block does; it ran the
    base under the fusion's head, silently."""
    batch = encode(base.tokenizer, TEXTS[:3])
    name = model.add_fusion(Fuse("a", "c"), SEQ)
    with torch.no_grad():
        for site in model.adapter_sites.values():  # values far from identity: V y != y
            for fusion in site.fusions.values():
                torch.nn.init.normal_(fusion.value.weight, std=0.3)
        model.activate(name)
        by_name = model(**batch)
        model.activate(Fuse("a", "c"))
        by_block = model(**batch)
        model.deactivate()
        base_under_its_head = model.heads[name](model.encode(**batch), batch["attention_mask"])
    assert torch.equal(by_name, by_block)
    assert not torch.allclose(by_name, base_under_its_head, atol=1e-3)


def _composed_set(model) -> list[str]:
    """Beside a, b, c: a stack named by its top, whose top reads past its Linear (it sees the
    LayerNorm with its own deltas); a fusion with LayerNorm deltas, by its own name and by a
    composition's; a fusion of a stack and an adapter."""
    model.add_adapter("pf", HoulsbyConfig(bottleneck=4, reads="normed", skip="sum"), SEQ)
    model.name_composition("pf", Stack("a", "pf"))
    fused = model.add_fusion(Fuse("a", "c"), SEQ, train_layernorm=True)
    model.name_composition("ac", Fuse("a", "c"))
    deep = model.add_fusion(Fuse(Stack("b", "a"), "c"), SEQ)
    for k, name in enumerate(("pf", fused, deep)):
        _randomise(model, name, seed=20 + k)  # fusions far from their identity start
    return ["pf", fused, "ac", deep]


@pytest.mark.parametrize("gather", [False, True], ids=["segments", "gathered"])
def test_composed_adapters_route_beside_single_ones_each_row_as_alone(model, base, gather):
    """Stacks and fusions, by name, in one routed pass with single adapters and base rows:
    each row gives what it gives alone (activated); the base rows stay the base's. Gathered,
    the single adapters' rows run over the stacks (a composed adapter's rows are the base's
    there), then each composed adapter's block on its own rows."""
    pf, fused, ac, deep = _composed_set(model)
    per_row = [pf, fused, "b", BASE, ac, "a", deep, "c", fused, BASE, pf, deep]
    batch = encode(base.tokenizer, TEXTS[:len(per_row)])
    model.gather = gather
    with torch.inference_mode():
        with model.routing(per_row) as route:
            assert route.gathering() is gather and route.single == ("a", "b", "c")
        model.deactivate()
        reference = model.encode(**batch)
        hidden, logits = model.forward_routed(**batch, per_row=per_row)
        for i, name in enumerate(per_row):
            if name == BASE:
                assert torch.equal(hidden[i], reference[i]) and logits[i] is None
                continue
            expected = alone(model, base.tokenizer, TEXTS[i], name)
            got = logits[i][:int(batch["attention_mask"][i].sum())] if name == "b" else logits[i]
            assert torch.allclose(got, expected, atol=1e-5, rtol=0), (i, name)
        model.deactivate()
        assert not torch.allclose(logits[0], model.heads[pf](reference[:1], batch[
            "attention_mask"][:1])[0], atol=1e-3)  # the stack really acts


def test_parallel_takes_composed_adapters_by_name(model, base):
    """A Parallel of a fusion, a stack and an adapter equals each alone; its shared trunk
    starts below every adapter the fusion and the stack use."""
    pf, fused, _ac, deep = _composed_set(model)
    model.add_adapter("up", HoulsbyConfig(bottleneck=8, layers=(1,), layernorm="own-layers"), SEQ)
    _randomise(model, "up", seed=30)
    assert model.first_layer_acting(["up"]) == 1
    # its Stack(b, a) holds a, which has deltas on the embeddings' LayerNorm
    assert model.first_layer_acting(["up", deep]) is None
    batch = encode(base.tokenizer, TEXTS[:4])
    with torch.inference_mode():
        together = model.forward_parallel(**batch, block=Parallel(pf, fused, deep, "up"))
        for name in (pf, fused, deep, "up"):
            model.activate(name)
            assert torch.allclose(together[name], model(**batch), atol=1e-5, rtol=0), name


@pytest.mark.parametrize("gather", [False, True], ids=["each", "batched"])
def test_composed_adapters_above_the_lowest_layer_share_the_trunk_below(model, base, gather):
    """A fusion and a stack of adapters in layer 1 only (no deltas below): a Parallel of
    them and a single adapter runs layer 0 once, and each equals its own pass."""
    for k, name in enumerate(("u1", "u2", "u3")):
        model.add_adapter(name, HoulsbyConfig(bottleneck=4, layers=(1,),
                                              layernorm="own-layers"), SEQ)
        _randomise(model, name, seed=40 + k)
    fused = model.add_fusion(Fuse("u1", "u2"), SEQ)
    model.name_composition("u3", Stack("u1", "u3"))
    _randomise(model, fused, seed=43)
    assert model.first_layer_acting([fused, "u3", "u2"]) == 1
    batch = encode(base.tokenizer, TEXTS[:4])
    rows = []
    model.encoder.encoder.layer[0].register_forward_hook(
        lambda _m, _a, out: rows.append(out.shape[0]))
    model.gather = gather
    with torch.inference_mode():
        together = model.forward_parallel(**batch, block=Parallel(fused, "u3", "u2"))
        assert len(rows) == 1  # layer 0 ran once, for all three
        for name in (fused, "u3", "u2"):
            model.activate(name)
            assert torch.allclose(together[name], model(**batch), atol=1e-5, rtol=0), name


def test_a_block_spelt_out_names_each_composed_adapter_once():
    """What `compose=` runs: a composed adapter's name stands for its block, except a
    stacked adapter's own name right after what it is stacked on, and a block spelt as a
    loaded one is that one (a fusion's parameters' name with it); expanding names inside
    a loaded block again ran its lower adapters twice."""
    from hubcli.core.composition import spelt_out

    loaded = {"s1": Stack("a", "s1"), "f": Fuse(Stack("a", "s1"), "a"),
              "named": Fuse("a", "b", name="Fuse(a, b) #2")}
    assert spelt_out(Stack("s1"), loaded) == Stack(Stack("a", "s1"))
    assert spelt_out(Stack("a", "s1"), loaded) == Stack("a", "s1")
    assert spelt_out(Stack("b", "a", "s1"), loaded) == Stack("b", "a", "s1")
    assert spelt_out(Stack("b", Stack("a", "s1")), loaded) == Stack("b", Stack("a", "s1"))
    assert spelt_out(Stack("b", "s1"), loaded) == Stack("b", Stack("a", "s1"))
    assert spelt_out(Stack(loaded["f"], "b"), loaded) == Stack(loaded["f"], "b")
    assert spelt_out(Fuse("s1", "a"), loaded).name == loaded["f"].name
    assert spelt_out(Stack("f", "b"), loaded) == Stack(loaded["f"], "b")
    assert spelt_out(Stack(Fuse("a", "b", name="named"), "s1"), loaded).children[0].name == \
        "Fuse(a, b) #2"
    with pytest.raises(ValueError, match=r"Fuse\(a, b\) is x and y"):
        spelt_out(Stack(Fuse("a", "b"), "a"), {"x": Fuse("a", "b"), "y": Fuse("a", "b")})


def test_a_fresh_fusion_is_the_same_in_every_process(tiny_base_dir, tmp_path):
    """`hub fuse --seed` did not reproduce a fusion (two runs differed by 0.15, and a resumed
    run from the one it resumed): its sites drew their initial weights in a set's order,
    which string hashing changes from one process to the next."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    code = f"""
import sys, torch
from safetensors.torch import save_file
from hubcli.base.load import load_base
from hubcli.core.composition import Fuse
from hubcli.core.config import HoulsbyConfig
from hubcli.core.model import AdapterModel
model = AdapterModel(load_base({str(tiny_base_dir)!r}).encoder)
for n in ("a", "b"):
    model.add_adapter(n, HoulsbyConfig(bottleneck=4), None)
torch.manual_seed(0)
own = model.add_fusion(Fuse("a", "b"), None)
save_file({{k: v.contiguous() for k, v in model.adapter_state_dict(own).items()}}, sys.argv[1])
"""
    made = []
    for seed in ("1", "2"):
        out = tmp_path / f"fusion{seed}.safetensors"
        subprocess.run([sys.executable, "-c", code, str(out)], check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed})
        made.append(load_file(str(out)))
    assert made[0].keys() == made[1].keys() and len(made[0]) > 4
    assert all(torch.equal(made[0][k], made[1][k]) for k in made[0])
