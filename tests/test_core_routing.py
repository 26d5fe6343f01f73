"""Per-sample routing: one pass, a different adapter per row, each row as if it ran alone."""

from __future__ import annotations

import copy

import pytest
import torch

from hubcli.core.config import HoulsbyConfig, LoraConfig
from hubcli.core.heads import HeadConfig
from hubcli.core.model import AdapterModel
from hubcli.core.routing import BASE, Route
from hubcli.errors import AdapterError

SEQ = HeadConfig("sequence_classification", 2, ("neg", "pos"))
TEXTS = ["a gripping, beautifully acted film", "dull", "the plot never quite comes together",
         "fine", "an utter mess from start to finish", "warm and funny", "i laughed", "meh",
         "one of the year's best", "two hours i will not get back", "quietly moving", "why"]


def _randomise(model: AdapterModel, name: str, seed: int) -> None:
    """Weights far from the near-identity start, so that adapters really differ."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.named_adapter_tensors(name).values():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def add_houlsby_set(model: AdapterModel) -> list[str]:
    """Eight adapters that differ in width, layers, activation, LayerNorm and head."""
    variants = [
        (HoulsbyConfig(bottleneck=8), SEQ),
        (HoulsbyConfig(bottleneck=4), HeadConfig("sequence_classification", 3, ("a", "b", "c"))),
        (HoulsbyConfig(bottleneck=16, layers=(1,)), SEQ),
        (HoulsbyConfig(bottleneck=8, non_linearity="relu"), HeadConfig("regression", 1)),
        (HoulsbyConfig(bottleneck=8, layernorm="frozen"), SEQ),
        (HoulsbyConfig(bottleneck=2, placement=("ffn_output",)), HeadConfig(
            "token_classification", 5, ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"))),
        (HoulsbyConfig(bottleneck=8, non_linearity="tanh"), HeadConfig("question_answering", 2)),
        (HoulsbyConfig(bottleneck=12), HeadConfig("sequence_classification", 2, ("x", "y"),
                                                  pooling="cls")),
    ]
    names = []
    for k, (config, head) in enumerate(variants):
        name = f"ad{k}"
        model.add_adapter(name, config, head)
        _randomise(model, name, seed=k)
        names.append(name)
    return names


@pytest.fixture(params=[False, True], ids=["segments", "gathered"])
def model(base, request):
    """Routed by segments (the CPU's way) and gathered over stacked weights (a GPU's)."""
    model = AdapterModel(base.encoder)
    model.gather = request.param
    model.eval()
    return model


def encode(tokenizer, texts):
    return dict(tokenizer(texts, padding=True, return_tensors="pt"))


def alone(model, tokenizer, text, name):
    """Row `text` on its own (no padding), through the ordinary activate() path."""
    batch = encode(tokenizer, [text])
    if name == BASE:
        model.deactivate()
        return model.encode(**batch)[0]
    model.activate(name)
    return model(**batch)[0]


def no_segments(monkeypatch, model) -> None:
    """Gathered, every site must run all its adapters at once: running one by segments fails."""
    if model.gather:
        def segments(*_args):
            raise AssertionError("a site ran by segments")
        monkeypatch.setattr(Route, "apply", segments)


def test_mixed_batch_of_eight_adapters_matches_each_row_alone(model, base, monkeypatch):
    from hubcli.core import heads

    names = add_houlsby_set(model)
    per_row = [*names, BASE, names[3], BASE, names[0]]
    batch = encode(base.tokenizer, TEXTS)
    no_segments(monkeypatch, model)
    stacked = []  # gathered, heads of one kind run as one stack (the [CLS] one is alone)
    real = heads.stack_heads
    monkeypatch.setattr(heads, "stack_heads", lambda hs: stacked.append(len(hs)) or real(hs))
    with torch.inference_mode():
        hidden, logits = model.forward_routed(batch["input_ids"], batch["attention_mask"],
                                              batch["token_type_ids"], per_row)
        for i, (text, name) in enumerate(zip(TEXTS, per_row)):
            expected = alone(model, base.tokenizer, text, name)
            got = hidden[i] if name == BASE else logits[i]
            n = int(batch["attention_mask"][i].sum())
            if got.dim() == 2:  # token-level outputs: compare the real tokens
                got, expected = got[:n], expected[:n]
            assert got.shape == expected.shape, name
            assert torch.allclose(got, expected, atol=1e-5, rtol=0), (i, name)
    assert logits[8] is None and logits[10] is None
    # five mean-pooling sequence heads (2, 3, 2, 1, 2 outputs) and two token heads (5, 2)
    assert sorted(stacked) == ([2, 5] if model.gather else [])


def test_base_rows_and_nothing_active_are_bit_identical_to_the_untouched_base(model, base):
    untouched = copy.deepcopy(base.encoder)
    names = add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:4])
    with torch.inference_mode():
        reference = untouched(**batch).last_hidden_state
        model.deactivate()
        assert torch.equal(model.encode(**batch), reference)
        hidden, _ = model.forward_routed(batch["input_ids"], batch["attention_mask"],
                                         batch["token_type_ids"], [names[0], BASE, names[5], None])
        assert torch.equal(hidden[1], reference[1]) and torch.equal(hidden[3], reference[3])
        assert not torch.allclose(hidden[0], reference[0], atol=1e-3)
        everything_base, _ = model.forward_routed(batch["input_ids"], batch["attention_mask"],
                                                  batch["token_type_ids"], [BASE] * 4)
        assert torch.equal(everything_base, reference)


def test_an_adapter_gone_wrong_reaches_no_other_row(model, base):
    """NaN in one adapter's weights stays in its own rows: a gathered site computes every
    adapter on every row, and must drop the others' results, not multiply them by zero; and
    it multiplies every row by every up-projection and up bias, so a NaN there makes it run
    by segments."""
    names = add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:3])
    with torch.inference_mode():
        before, _ = model.forward_routed(**batch, per_row=[names[0], BASE, names[1]])
        for weight in ("down.bias", "up.bias", "up.weight"):  # cleared columns; products
            for site in model.adapter_sites.values():
                if names[1] in site.adapters:
                    site.adapters[names[1]].get_parameter(weight).fill_(float("nan"))
            after, _ = model.forward_routed(**batch, per_row=[names[0], BASE, names[1]])
            # a gathered site with a non-finite up-projection runs by segments: the same
            # numbers to rounding, the base row the same bits
            assert torch.equal(after[1], before[1]), weight
            assert torch.allclose(after[0], before[0], atol=1e-5, rtol=0), weight
            assert torch.isnan(after[2]).all(), weight


def test_route_ends_with_the_block_and_weight_changes_show_at_once(model, base):
    names = add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.no_grad():
        first = model.forward_routed(**batch, per_row=[names[0], names[1]])[1][0]
        model.forward_routed(**batch, per_row=[names[2], names[0]])  # another mix between
        _randomise(model, names[0], seed=99)  # nothing cached may hide the change
        second = model.forward_routed(**batch, per_row=[names[0], names[1]])[1][0]
        model.activate(names[0])
        expected = model(**encode(base.tokenizer, TEXTS[:1]))[0]
    assert not torch.allclose(first, second)
    assert torch.allclose(second, expected, atol=1e-5, rtol=0)
    assert model.routes.route is None  # the pass's route, gone with it


def test_every_site_reads_its_models_one_route_holder_copies_included(base):
    """The model sets a pass's route once, on the holder all its sites read: a site with
    another holder would run that pass unrouted. A deep copy's sites share a new holder of
    their own (routing the copy leaves the original alone); a model made again over an
    encoder already wrapped keeps its sites' holder."""
    model = AdapterModel(base.encoder)
    model.add_adapter("x", HoulsbyConfig(bottleneck=4, init_scale=0.3), SEQ)
    model.eval()
    twin = copy.deepcopy(model)
    again = AdapterModel(base.encoder)
    for m in (model, twin):
        sites = m.sites()
        assert all(site.routes is m.routes for site in sites)
    assert twin.routes is not model.routes and again.routes is model.routes
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        with twin.routing(["x", BASE]) as route:
            assert twin.routes.route is route and model.routes.route is None
        _, logits = twin.forward_routed(**batch, per_row=["x", "x"])
        twin.activate("x")
        assert torch.allclose(logits[1], twin(**encode(base.tokenizer, TEXTS[1:2]))[0],
                              atol=1e-5, rtol=0)


def test_weights_replaced_rather_than_written_show_at_once(model, base):
    """`load_state_dict(assign=True)` puts new Parameters in an adapter's modules, its
    LayerNorm deltas and its head, and writes nothing in place; assigning a submodule
    (`adapter.up = Linear(...)`) neither: a kept stack built from the old ones must not
    survive either."""
    names = add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:2])
    gen = torch.Generator().manual_seed(5)
    owners = [site.adapters[names[0]] for site in model.adapter_sites.values()
              if names[0] in site.adapters]
    owners += [site.deltas[names[0]] for site in model.layernorm_sites.values()
               if names[0] in site.deltas]
    with torch.no_grad():
        first = model.forward_routed(**batch, per_row=[names[0], names[1]])[1][0]
        for module in [*owners, model.heads[names[0]]]:
            module.load_state_dict({k: torch.randn(v.shape, generator=gen) * 0.3
                                    for k, v in module.state_dict().items()}, assign=True)
        second = model.forward_routed(**batch, per_row=[names[0], names[1]])[1][0]
        expected = alone(model, base.tokenizer, TEXTS[0], names[0])
        assert not torch.allclose(first, second)
        assert torch.allclose(second, expected, atol=1e-5, rtol=0)
        # a submodule assigned: an up-projection and a head's output layer
        for module in [*owners[:len(owners) // 2], model.heads[names[0]]]:
            old = module.up if hasattr(module, "up") else module.out
            new = torch.nn.Linear(old.in_features, old.out_features)
            setattr(module, "up" if hasattr(module, "up") else "out", new)
        third = model.forward_routed(**batch, per_row=[names[0], names[1]])[1][0]
        expected = alone(model, base.tokenizer, TEXTS[0], names[0])
    assert not torch.allclose(second, third)
    assert torch.allclose(third, expected, atol=1e-5, rtol=0)


def test_routing_to_an_unknown_adapter_is_refused(model, base):
    add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:2])
    with pytest.raises(AdapterError, match="no adapter named 'nope'"):
        model.forward_routed(**batch, per_row=["ad0", "nope"])


def test_a_name_per_row_is_required_and_the_base_is_no_adapter(model, base):
    """Two names for three rows dropped the third row's output silently (four raised a bare
    IndexError); `BASE` in a Parallel was 'no adapter named __base__ is loaded'."""
    from hubcli.core.composition import Parallel

    add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:3])
    for per_row in (["ad0", "ad1"], ["ad0"] * 4):
        with pytest.raises(AdapterError, match=f"{len(per_row)} adapter names for a batch of "
                                               "3 rows"):
            model.forward_routed(**batch, per_row=per_row)
    with pytest.raises(AdapterError, match="__base__ is the untouched base, not an adapter"):
        model.forward_parallel(**batch, block=Parallel("ad0", BASE))


def test_mixed_batch_of_both_methods_matches_each_row_alone(model, base, monkeypatch):
    houlsby = add_houlsby_set(model)[:4]
    lora = []
    for k, config in enumerate([LoraConfig(rank=8), LoraConfig(rank=4, alpha=4),
                                LoraConfig(rank=2, placement=("value",)),
                                LoraConfig(rank=8, layers=(0,))]):
        name = f"lora{k}"
        model.add_adapter(name, config, SEQ)
        _randomise(model, name, seed=10 + k)
        lora.append(name)
    per_row = [houlsby[0], lora[0], BASE, lora[1], houlsby[1], lora[2], houlsby[2], lora[3],
               houlsby[3], BASE, lora[0], houlsby[0]]
    batch = encode(base.tokenizer, TEXTS)
    no_segments(monkeypatch, model)
    with torch.inference_mode():
        hidden, logits = model.forward_routed(**batch, per_row=per_row)
        for i, (text, name) in enumerate(zip(TEXTS, per_row)):
            expected = alone(model, base.tokenizer, text, name)
            got = hidden[i] if name == BASE else logits[i]
            n = int(batch["attention_mask"][i].sum())
            if got.dim() == 2:
                got, expected = got[:n], expected[:n]
            assert torch.allclose(got, expected, atol=1e-5, rtol=0), (i, name)


def test_two_threads_route_their_own_batches_through_one_model_at_once(model, base):
    """Thread B runs a whole pass while thread A's pass is inside layer 0's attention output
    (its route set, the sublayer's input kept for an adapter that reads past the Linear):
    with a route or input shared by the sites, B would route A's rows its own way and clear
    both on leaving."""
    import threading

    names = add_houlsby_set(model)
    model.add_adapter("pf", HoulsbyConfig(bottleneck=8, reads="normed", skip="sum"), SEQ)
    _randomise(model, "pf", seed=9)
    batch = encode(base.tokenizer, TEXTS[:4])
    routes = ([names[0], "pf", BASE, names[3]], ["pf", BASE, names[0], names[0]])

    def hidden(per_row):
        return model.forward_routed(batch["input_ids"], batch["attention_mask"],
                                    batch["token_type_ids"], per_row)[0]

    got: dict[str, torch.Tensor] = {}

    def pass_b():
        with torch.inference_mode():
            got["b"] = hidden(routes[1])

    thread_b = threading.Thread(target=pass_b)

    def start_b_from_a(_module, _inputs, _output):
        if threading.current_thread() is not thread_b:
            thread_b.start()
            thread_b.join()

    with torch.inference_mode():
        expected = [hidden(r) for r in routes]
        site = model.adapter_sites[(0, "attention_output")].base_layer
        hook = site.register_forward_hook(start_b_from_a)
        try:
            got["a"] = hidden(routes[0])
        finally:
            hook.remove()
    assert "b" in got and not torch.equal(expected[0], expected[1])
    assert torch.allclose(got["a"], expected[0], atol=1e-6, rtol=0)
    assert torch.allclose(got["b"], expected[1], atol=1e-6, rtol=0)


def test_a_routed_pass_runs_under_autocast(model, base):
    """Under bf16 autocast (a caller's, on the CPU or a GPU) a routed pass runs, gathered or
    by segments, and gives the float32 result to bf16's precision."""
    names = add_houlsby_set(model)
    batch = encode(base.tokenizer, TEXTS[:4])
    per_row = [names[0], BASE, names[3], names[7]]
    with torch.inference_mode():
        exact, _ = model.forward_routed(**batch, per_row=per_row)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low, _ = model.forward_routed(**batch, per_row=per_row)
    assert 0 < (low - exact).abs().max() < 0.1  # bf16 products ran, to their precision


def test_base_rows_of_random_mixes_equal_the_base_on_the_batch_in_the_routes_order(model, base):
    """What routing guarantees a `__base__` row, whatever the mix: exactly the untouched
    base's output for the same batch in the route's row order."""
    import random

    model.add_adapter("h", HoulsbyConfig(bottleneck=4, init_scale=0.3), SEQ)
    model.add_adapter("f", LoraConfig(rank=2, layers=(1,), placement=("value",)), SEQ)
    _randomise(model, "f", seed=5)
    rng = random.Random(0)
    with torch.inference_mode():
        for _ in range(40):
            texts = rng.sample(TEXTS, rng.randint(2, 6))
            per_row = [rng.choice(["f", "h", BASE]) for _ in texts]
            batch = encode(base.tokenizer, texts)
            route = Route.of(per_row)
            model.deactivate()
            reference = route.unsort(model.encode(**{k: route.sort(v) for k, v in batch.items()}))
            hidden, _ = model.forward_routed(**batch, per_row=per_row)
            for i, name in enumerate(per_row):
                if name == BASE:
                    assert torch.equal(hidden[i], reference[i]), (texts, per_row, i)
