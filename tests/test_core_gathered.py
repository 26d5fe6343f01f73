"""Gathered routing's kept stacks: what each site stacks for which batches (the numbering
every mix shares, or a batch's own), when they are rebuilt or dropped, and what a pass pays
to check them. Each row's own result is `test_core_routing.py`'s subject."""

from __future__ import annotations

import copy

import pytest
import torch

from hubcli.core.composition import Stack
from hubcli.core.config import HoulsbyConfig
from hubcli.core.model import AdapterModel
from hubcli.core.routing import BASE, Route
from hubcli.errors import AdapterError
from test_core_routing import SEQ, TEXTS, _randomise, add_houlsby_set, alone, encode


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
    sites = model.sites()

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
    table directly (as a test of fusion does) must leave its name routable as an adapter:
    gathered, in the numbering (else the route is refused)."""
    model = AdapterModel(base.encoder)
    model.eval()
    model.gather = True
    model.add_adapter("s", HoulsbyConfig(bottleneck=2), SEQ)
    model.name_composition("s", Stack("s"))
    with model.routing(["s"]) as route:  # composed: slot 0, its block run after
        assert route.blocks == {"s": Stack("s")} and route.slots.tolist() == [0]
    model.compositions.clear()
    for model.gather in (False, True):
        with model.routing(["s", BASE]) as route:
            assert route.names == ("s",) and not route.blocks
            assert (route.numbering == ("s",)) is model.gather


def test_removing_a_fusion_leaves_the_kept_stacks_of_routing(base):
    """A fusion is not numbered (its rows run on after the stacks): removing it renumbers
    nothing, and no site (nor head kind) drops the stacks a server's mixes keep reading."""
    from hubcli.core.composition import Fuse

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(3):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=2), SEQ)
    fusion = model.add_fusion(Fuse("n0", "n1"), SEQ)
    batch = encode(base.tokenizer, TEXTS[:3])
    sites = model.sites()
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


def test_tables_edited_directly_leave_no_stale_stack(base):
    """Heads or a site's adapters set or deleted in their tables directly (not through the
    model): the kept stacks and a head kind's members follow, and each row still gets its
    own adapter's result."""
    from hubcli.core.heads import HeadConfig, build_head

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(3):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=4, init_scale=0.3), SEQ)
    batch = encode(base.tokenizer, TEXTS[:3])

    def check(per_row):
        _, logits = model.forward_routed(**batch, per_row=per_row)
        for i, name in enumerate(per_row):
            expected, got = alone(model, base.tokenizer, TEXTS[i], name), logits[i]
            if got.dim() == 2:  # a token head: the real tokens
                got = got[:int(batch["attention_mask"][i].sum())]
            assert got.shape == expected.shape, (per_row, i)
            assert torch.allclose(got, expected, atol=1e-5, rtol=0), (per_row, i)

    with torch.inference_mode():
        check(["n0", "n1", "n2"])
        tokens = HeadConfig("token_classification", 3, ("O", "B-X", "I-X"))
        model.heads["n1"] = build_head(model.hidden_size, tokens).eval()  # another kind
        check(["n0", "n1", "n2"])
        site = model.adapter_sites[(0, "ffn_output")]
        site.adapters["n2"] = copy.deepcopy(site.adapters["n0"])  # n0's bottleneck for n2's
        check(["n0", "n1", "n2"])
        del model.heads["n1"]
        _, logits = model.forward_routed(**batch, per_row=["n0", "n1", "n2"])
        assert logits[1] is None


def test_a_removed_adapters_head_is_freed_whatever_the_kept_list_says(base):
    """The kept list of routable adapters lacks one (a composition dropped from the table
    directly): removing that adapter must still drop the head stacks holding its head."""
    import gc
    import weakref

    from hubcli.core.composition import Parallel

    model = AdapterModel(base.encoder)
    model.gather = True
    model.eval()
    for k in range(3):
        model.add_adapter(f"n{k}", HoulsbyConfig(bottleneck=2), SEQ)
    model.name_composition("n1", Stack("n1"))
    batch = encode(base.tokenizer, TEXTS[:2])
    with torch.inference_mode():
        model.forward_routed(**batch, per_row=["n0", "n2"])  # keeps routable() without n1
        model.compositions.clear()
        model.forward_parallel(**batch, block=Parallel("n0", "n1", "n2"))
    refs = [weakref.ref(p) for p in model.heads["n1"].parameters()]
    model.remove_adapter("n1")
    gc.collect()
    assert refs and [r for r in refs if r() is not None] == []
