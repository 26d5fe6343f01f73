"""Per-sample routing: one pass, a different adapter per row, each row as if it ran alone."""

from __future__ import annotations

import copy

import pytest
import torch

from hubcli.core.config import HoulsbyConfig, LoraConfig
from hubcli.core.heads import HeadConfig
from hubcli.core.composition import Stack
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
        sites = [*m.adapter_sites.values(), *m.layernorm_sites.values()]
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


def test_a_gathered_site_stacks_a_set_of_adapters_once_whatever_the_rows_order(base, monkeypatch):
    from hubcli.core import gathered

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    names = add_houlsby_set(model)
    builds = []
    real = gathered.bottlenecks
    monkeypatch.setattr(gathered, "bottlenecks",
                        lambda *a: builds.append(tuple(a[1])) or real(*a))
    batch = encode(base.tokenizer, TEXTS[:3])
    with torch.inference_mode():
        for per_row in ([names[0], names[1], BASE], [names[1], BASE, names[0]],
                        [BASE, names[0], names[1]]):
            model.forward_routed(**batch, per_row=per_row)
    sites = sum(1 for s in model.adapter_sites.values() if {names[0], names[1]} & set(s.adapters))
    # 2 of the 8 adapters at each site: the batch's own are stacked, not all 8
    assert sites > 0 and builds == [(names[0], names[1])] * sites


def test_batches_mixing_most_adapters_share_each_sites_stacks(base, monkeypatch):
    """A server's batches each mix a different most of its adapters: every site stacks all
    of them once, in slots every mix shares, and each row still gets its own adapter. With a
    stack per mix (more mixes than a site keeps), each batch rebuilt them all."""
    from hubcli.core import gathered, heads

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    names = add_houlsby_set(model)
    for n in names[5:]:  # the first five's heads are all mean-pooled: one kind
        model.remove_adapter(n)
    names = names[:5]
    builds, head_builds = [], []
    real, real_heads = gathered.bottlenecks, heads.stack_heads
    monkeypatch.setattr(gathered, "bottlenecks",  # what each build stacks at its site
                        lambda *a: builds.append(tuple(n for n in a[1] if n in a[2])) or real(*a))
    monkeypatch.setattr(heads, "stack_heads",
                        lambda hs: head_builds.append(len(hs)) or real_heads(hs))
    mixes = [[names[k], names[(k + 1) % 5], names[(k + 2) % 5], BASE] for k in range(5)]
    mixes += [list(names[:4]), [names[4], names[0], BASE, names[3]]]
    batch = encode(base.tokenizer, TEXTS[:4])
    with torch.inference_mode():
        for per_row in mixes:
            _, logits = model.forward_routed(**batch, per_row=per_row)
            for i, name in enumerate(per_row):
                if name != BASE:
                    expected = alone(model, base.tokenizer, TEXTS[i], name)
                    assert torch.allclose(logits[i], expected, atol=1e-5, rtol=0), (per_row, i)
    sites = [s for s in model.adapter_sites.values() if s.adapters]
    assert sorted(builds) == sorted(tuple(n for n in names if n in s.adapters) for s in sites)
    assert head_builds == [5]
    assert all(len(s._stack.kept) == 1 for s in sites)


def test_removing_an_adapter_frees_its_weights_from_the_gathered_stacks(base):
    """Removed, an adapter's bottlenecks, LayerNorm deltas and head are garbage: no site's or
    head kind's stack keeps them alive (a server swapping adapters in and out would grow)."""
    import gc
    import weakref

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for name in ("x", "y"):
        model.add_adapter(name, HoulsbyConfig(bottleneck=4, init_scale=0.3), SEQ)
    batch = encode(base.tokenizer, TEXTS[:2])
    refs = [weakref.ref(p) for p in model.named_adapter_tensors("x").values()]
    with torch.inference_mode():
        model.forward_routed(**batch, per_row=["x", "y"])
    assert model._stacks, "the heads ran as one stack"
    model.remove_adapter("x")
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_mixes_without_a_sites_adapters_leave_its_kept_stacks_alone(base, monkeypatch):
    """A server rotating 8 mixes, 3 of them with adapter "x" (layer 0 only): x's sites keep
    the one stack they build. The 5 mixes without x must not take places in x's sites'
    caches (4 places): that evicted the real stacks, rebuilt on every pass."""
    from hubcli.core import gathered

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    model.add_adapter("x", HoulsbyConfig(bottleneck=4, layers=(0,), layernorm="frozen"), SEQ)
    others = [f"o{k}" for k in range(4)]
    for name in others:
        model.add_adapter(name, HoulsbyConfig(bottleneck=4, layers=(1,), layernorm="frozen"),
                          SEQ)
    at_x = []  # builds at x's sites
    real = gathered.bottlenecks

    def counted(numbering, names, adapters):
        if "x" in adapters:
            at_x.append(names)
        return real(numbering, names, adapters)

    monkeypatch.setattr(gathered, "bottlenecks", counted)
    o0, o1, o2, o3 = others
    mixes = [["x", o0], [o1, o2], ["x", o1], [o3, o0], ["x", o2], [o0, o2], [o1, o3], [o2, o3]]
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        for _ in range(3):
            for per_row in mixes:
                model.forward_routed(**batch, per_row=per_row)
    assert len(at_x) == 2  # once at each of x's two sites


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


def test_a_rebuilt_stack_is_the_newest_in_its_cache():
    """A stack rebuilt because its weights changed is the one used last: the next eviction
    takes the oldest other entry, not it."""
    from hubcli.core.gathered import StackCache

    cache = StackCache()
    modules = {k: torch.nn.Linear(1, 1) for k in range(StackCache.SIZE + 1)}
    for k in range(StackCache.SIZE):
        cache.get(k, lambda k=k: [modules[k]], lambda k=k: k)
    with torch.no_grad():
        modules[0].weight.add_(1.0)  # entry 0, the oldest, goes stale
    cache.get(0, lambda: [modules[0]], lambda: 0)  # rebuilt
    cache.get(StackCache.SIZE, lambda: [modules[StackCache.SIZE]], lambda: StackCache.SIZE)
    assert list(cache.kept) == [2, 3, 0, 4]  # 1, the oldest, went


def test_each_rows_one_hot_covers_its_tokens_at_any_rank():
    from hubcli.core.gathered import _one_hot

    slots = torch.tensor([2, 0, 1])
    for y in (torch.zeros(3, 4, 5), torch.zeros(3, 4, 2, 5)):  # a slot per row, at rank 3, 4
        index = slots.view(-1, *(1,) * (y.dim() - 2))
        got = _one_hot(index, 3, y, torch.float32)
        tokens = y.shape[:-1].numel() // 3
        assert torch.equal(got.argmax(1), slots.repeat_interleave(tokens))
        assert got.shape == (y.shape[:-1].numel(), 3) and torch.equal(got.sum(1),
                                                                      torch.ones(len(got)))


def test_adapters_made_under_inference_mode_route_gathered(base):
    """Tensors made under torch.inference_mode have no version counter for the stack cache
    to read; routing through them still works, and equals the adapter alone."""
    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        for k, name in enumerate(("x", "y")):
            model.add_adapter(name, HoulsbyConfig(bottleneck=4, init_scale=0.3), SEQ)
        _, logits = model.forward_routed(**batch, per_row=["x", "y"])
        model.activate("y")
        alone = model(**encode(base.tokenizer, TEXTS[1:2]))[0]
    assert torch.allclose(logits[1], alone, atol=1e-5, rtol=0)


def test_the_stack_cache_holds_up_under_threads_evicting_each_other():
    """hub serve's workers share each site's cache: lookups, inserts and evictions from
    several threads at once never fail (they did with an unlocked LRU)."""
    import sys
    import threading

    from hubcli.core.gathered import StackCache

    cache, errors = StackCache(), []
    keys = [(f"n{k}",) for k in range(StackCache.SIZE + 2)]
    # 200 weights: a lookup long enough to be interrupted
    modules = [torch.nn.Linear(1, 1) for _ in range(100)]

    def work(offset):
        try:
            for i in range(300):
                key = keys[(i * (offset + 1)) % len(keys)]
                assert cache.get(key, lambda: modules, lambda key=key: key) == key
        except Exception as err:  # noqa: BLE001 - the test reports any
            errors.append(repr(err))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and len(cache.kept) == StackCache.SIZE


def test_a_gathered_routes_slots_number_its_numbering():
    """Slots follow the numbering given (every adapter loaded), not the batch's own: the
    same adapter takes the same slot in every mix; one the numbering leaves out is refused."""
    numbering = ("a", "b", "c", "d")
    route = Route.of(["c", BASE, "a", "c"], gather=True, numbering=numbering)
    assert route.names == ("a", "c") and route.numbering == numbering
    assert route.slots.tolist() == [0, 1, 3, 3]  # sorted rows: the base's, a's, then c's
    assert Route.of(["c"], gather=True).slots.tolist() == [1]  # by default, the batch's own
    with pytest.raises(ValueError, match="the numbering leaves out e"):
        Route.of(["a", "e"], gather=True, numbering=numbering)


def test_a_site_whose_adapters_cannot_all_share_a_stack_still_stacks_a_batchs_own(
        base, monkeypatch):
    """One adapter that reads past its Linear cannot join a stack: a batch without it still
    runs gathered at every site (the batch's own stacked), and one with it by segments."""
    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(3):
        model.add_adapter(f"h{k}", HoulsbyConfig(bottleneck=8, init_scale=0.3), SEQ)
    model.add_adapter("pf", HoulsbyConfig(bottleneck=8, reads="normed", skip="sum"), SEQ)
    _randomise(model, "pf", seed=3)
    segments = []
    real = Route.apply
    monkeypatch.setattr(Route, "apply", lambda *a: segments.append(1) or real(*a))
    batch = encode(base.tokenizer, TEXTS[:4])
    with torch.inference_mode():
        _, logits = model.forward_routed(**batch, per_row=["h0", "h1", "h2", BASE])
        assert segments == []
        model.forward_routed(**batch, per_row=["h0", "pf", "h2", BASE])
        assert segments  # pf's sites ran by segments
        for i in range(3):
            model.activate(f"h{i}")
            expected = model(**encode(base.tokenizer, TEXTS[i:i + 1]))[0]
            assert torch.allclose(logits[i], expected, atol=1e-5, rtol=0)


def test_many_adapters_loaded_a_route_numbers_only_its_batchs(base, monkeypatch):
    """Past `gathered.NUMBERED` adapters loaded, what a pass costs must not grow with them:
    a route numbers its batch's adapters only."""
    from hubcli.core import gathered

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(4):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=2), SEQ)
    with model.routing(["n2", "n0"]) as route:
        assert route.numbering == ("n0", "n1", "n2", "n3")
    monkeypatch.setattr(gathered, "NUMBERED", 3)
    with model.routing(["n2", "n0"]) as route:
        assert route.numbering == route.names == ("n0", "n2")


def test_adding_or_removing_an_adapter_drops_every_kept_stack(base):
    """A new adapter renumbers the routes: the stacks of the old numbering would never be
    read again, so none may stay in memory (sites' and heads' alike)."""
    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(3):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=2), SEQ)
    batch = encode(base.tokenizer, TEXTS[:3])
    sites = [*model.adapter_sites.values(), *model.layernorm_sites.values()]

    def kept() -> int:
        return (sum(len(s._stack.kept) for s in sites)
                + sum(len(c.kept) for c in model._stacks.values()))

    with torch.inference_mode():
        model.forward_routed(**batch, per_row=["n0", "n1", "n2"])
        assert kept() > 0
        model.add_adapter("late", HoulsbyConfig(bottleneck=2, layers=(0,)), SEQ)
        assert kept() == 0
        model.forward_routed(**batch, per_row=["n0", "n1", "late"])
        assert kept() > 0
        model.remove_adapter("late")
        assert kept() == 0


def test_a_batch_using_few_of_a_sites_adapters_stacks_only_its_own(base, monkeypatch):
    """Few of many used (fewer than half), a bottleneck site stacks the batch's adapters only,
    keyed by those it has, so mixes that differ only where a site has nothing (x, y: layer
    0) share its stack; half or more, it stacks all it has. A LayerNorm site's table serves
    every mix: built once, whatever the mixes."""
    from hubcli.core import gathered

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(4):
        model.add_adapter(f"o{k}", HoulsbyConfig(bottleneck=2, layers=(1,), init_scale=0.3),
                          SEQ)
    for n in ("x", "y"):
        model.add_adapter(n, HoulsbyConfig(bottleneck=2, layers=(0,), init_scale=0.3), SEQ)
    built, norms = [], []
    real, real_norms = gathered.bottlenecks, gathered.layernorms
    monkeypatch.setattr(gathered, "bottlenecks",
                        lambda *a: built.append(tuple(n for n in a[1] if n in a[2]))
                        or real(*a))
    monkeypatch.setattr(gathered, "layernorms", lambda *a: norms.append(a) or real_norms(*a))
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        for per_row in (["o0", "x"], ["o0", "y"], ["o1", "x"], ["o2", "o3"]):
            model.forward_routed(**batch, per_row=per_row)
    # layer 1's two sites: o0's, o1's (1 of 4), all four (2 of 4), once each; layer 0's: x
    # and y (1 of 2), once
    assert sorted(built) == sorted([("o0",), ("o1",), ("o0", "o1", "o2", "o3")] * 2
                                   + [("x", "y")] * 2)
    # every adapter trains every LayerNorm: one table per site
    assert len(norms) == sum(1 for s in model.layernorm_sites.values() if s.deltas)


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


def test_a_gathered_parallel_stacks_only_its_blocks_adapters(base, monkeypatch):
    """A Parallel block runs again as it is: its copies are numbered by its own adapters, so
    no site stacks (and multiplies by) the others loaded, as a server's mixed batch would."""
    from hubcli.core import gathered
    from hubcli.core.composition import Parallel

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(4):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=2, init_scale=0.3), SEQ)
    built = []
    real = gathered.bottlenecks
    monkeypatch.setattr(gathered, "bottlenecks",
                        lambda *a: built.append(tuple(n for n in a[1] if n in a[2])) or real(*a))
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        out = model.forward_parallel(**batch, block=Parallel("n3", "n1"))
        model.activate("n3")
        assert torch.allclose(out["n3"], model(**batch), atol=1e-5, rtol=0)
    assert built and set(built) == {("n1", "n3")}


def test_routing_follows_tables_edited_behind_the_models_back(base):
    """The routable adapters are kept between passes; a composition dropped from the model's
    table directly (as a test of fusion does) must not leave its name refused."""
    model = AdapterModel(base.encoder)
    model.eval()
    model.add_adapter("s", HoulsbyConfig(bottleneck=2), SEQ)
    model.name_composition("s", Stack("s"))
    with pytest.raises(AdapterError, match="fusion or stack"):
        with model.routing(["s"]):
            pass
    model.compositions.clear()
    for model.gather in (False, True):
        with model.routing(["s", BASE]) as route:
            assert route.names == ("s",)


def test_removing_a_fusion_leaves_the_kept_stacks_of_routing(base):
    """A fusion is not routed to: removing it renumbers nothing, and no site (nor head kind)
    drops the stacks a server's mixes keep reading."""
    from hubcli.core.composition import Fuse

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(3):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=2), SEQ)
    fusion = model.add_fusion(Fuse("n0", "n1"), SEQ)
    batch = encode(base.tokenizer, TEXTS[:3])
    sites = [*model.adapter_sites.values(), *model.layernorm_sites.values()]
    with torch.inference_mode():
        model.forward_routed(**batch, per_row=["n0", "n1", "n2"])
    kept = [list(s._stack.kept.values()) for s in sites]
    heads = {k: list(c.kept.values()) for k, c in model._stacks.items()}
    model.remove_adapter(fusion)
    assert [list(s._stack.kept.values()) for s in sites] == kept and any(kept)
    assert {k: list(c.kept.values()) for k, c in model._stacks.items()} == heads and heads


def test_what_a_routed_pass_reads_does_not_grow_with_the_adapters_loaded(base, monkeypatch):
    """The same batch of 2 adapters with 8, then 24 loaded (fewer than half either way: the
    batch's own stacked): a pass asks each head's kind and checks each kept stack's weights
    as often (the numbering is read through once, not per pass)."""
    from hubcli.core import gathered, heads

    counts = {"kind": 0, "checks": 0}
    real_kind, real_holds = heads.head_kind, gathered._Kept.holds
    monkeypatch.setattr(heads, "head_kind",
                        lambda h: counts.__setitem__("kind", counts["kind"] + 1) or real_kind(h))
    monkeypatch.setattr(gathered._Kept, "holds", lambda self: counts.__setitem__(
        "checks", counts["checks"] + len(self.weights)) or real_holds(self))
    batch = encode(base.tokenizer, TEXTS[:4])
    seen = []
    for loaded in (8, 24):
        model = AdapterModel(copy.deepcopy(base.encoder))
        model.gather = True
        model.eval()
        for k in range(loaded):
            model.add_adapter(f"n{k:02d}", HoulsbyConfig(bottleneck=2, layernorm="frozen"), SEQ)
        with torch.inference_mode():
            model.forward_routed(**batch, per_row=["n00", "n01"] * 2)  # builds
            counts.update(kind=0, checks=0)
            model.forward_routed(**batch, per_row=["n00", "n01"] * 2)
        seen.append(dict(counts))
    assert seen[0] == seen[1] and seen[0]["kind"] > 0
