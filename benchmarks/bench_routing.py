#!/usr/bin/env python3
"""Routing and composition throughput on the packaged MiniLM-L6 (fp32, inference mode), one
batch of 64 short sentences from the shipped sentiment sample:

- mixed:    one routed pass, the rows spread over 8 Houlsby adapters (bottleneck 64), each
            site running each adapter on its own rows (the CPU's default)
- mixed_gathered: the same, each site running all 8 at once over stacked weights (a GPU's
            default, `AdapterModel.gather`)
- one:      the same batch through one adapter (activate)
- bare:     the same batch through the untouched base (encoder only)
- naive:    the mixed batch the naive way: group rows by adapter, one pass per group
- parallel: Parallel of 4 adapters in every layer (`forward_parallel`), each adapter
            continuing on its own (the CPU's default), vs 4 separate passes (sep4)
- parallel_gathered: the same Parallel as one gathered batch of the 4 copies (a GPU's)
- parallel_top{K}, parallel_gathered_top{K}: the same for 4 adapters in the top K layers only
            (`--top`, AdapterDrop's adapters, LayerNorm deltas in those layers only: nothing
            below), which Parallel runs once for all four, vs their 4 separate passes
            (sep4_top{K})
- fuse:     a Fuse of 3 adapters (activate), vs bare
- mixed_fuse: the mixed batch with a ninth of its rows through that fusion, by its name, in
            one routed pass by segments, vs mixed_fuse_apart: the single adapters' rows
            routed, then the fusion's rows in a pass of their own (how composed adapters ran
            beside others before they were routed); mixed_fuse_gathered and
            mixed_fuse_apart_gathered: the same, the single adapters' rows gathered (in one
            pass, the fusion's rows then run by segments on the stacks' output)

Before timing, every Parallel and the mixed batch, both ways, are checked against each
adapter's own pass (`max_abs_diff`). The variants run interleaved (A B C ... A B C ...), `--repeats`
rounds, so a noisy neighbour slows them alike (the mixed batch's group, then the Parallels'); the best and the median of each are printed
with the ratios the routing issue sets targets for (mixed/one >= 0.85 and mixed/bare >= 0.75
in throughput, sep4/parallel >= 2, fuse/bare <= 1.5 in time). On a GPU (`--device cuda`)
each timed call ends with a synchronize.

With `--host-bound` the base is a random BERT as deep as the packaged one, with the same
tokenizer and sentences, but 12x narrower (d=32), and the bottlenecks are 2 wide: the
arithmetic all but vanishes (attention aside: on a CPU it is still about half a bare pass),
and what is timed is what the host does per pass (Python, and torch's dispatch of each
operation). On a GPU a batch this size is bound by exactly that
(`--device cuda`: 4-7 ms a pass, 2.4 ms of it kernels), so this is the CPU's view of the
cost a GPU pays, for work on the host's side where no GPU is at hand.

Each variant's operations are counted too, once, outside the timing (`launches`): the ATen
operations a pass dispatches that compute something (views, and conversions to the dtype a
tensor has, left out), each about one kernel launch on a GPU, and those of them that wait on
the device (a value read back to the host). At a batch this size a GPU is bound by launches,
so their ratios foretell its time's: at e68319c they gave a Fuse of 3 307 / 130 = 2.36x the
bare base, where the H100 measured 2.21-2.39x (the mixed batch's, 213 / 248 = 0.86x one
adapter, measured 0.62x: host work beyond launches, part of it stacks the bench itself made
sites rebuild then). They are the same on any device, so the CPU can count what a change
saves a GPU.

    python benchmarks/bench_routing.py [--repeats 9] [--threads N] [--top 1,2,3] [--device cuda]
                                       [--host-bound]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(n_adapters: int, host_bound: bool = False):
    import torch

    from hubcli.base.load import load_base
    from hubcli.core.bert import CompactBert
    from hubcli.core.composition import Fuse
    from hubcli.core.config import HoulsbyConfig
    from hubcli.core.heads import HeadConfig
    from hubcli.core.model import AdapterModel

    base = load_base(None)
    torch.manual_seed(0)
    encoder, bottleneck = base.encoder, 64
    if host_bound:  # the packaged base's depth, tokenizer and sentences; random, 12x narrower
        encoder = CompactBert({**base.encoder.raw_config, "hidden_size": 32,
                               "num_attention_heads": 2, "intermediate_size": 64}).eval()
        bottleneck = 2
    model = AdapterModel(encoder)
    head = HeadConfig("sequence_classification", 2, ("negative", "positive"))
    names = [f"ad{k}" for k in range(n_adapters)]
    for n in names:
        model.add_adapter(n, HoulsbyConfig(bottleneck=bottleneck, init_scale=0.05), head)
    fuse = Fuse(*names[:3])
    model.add_fusion(fuse, head)
    model.eval()
    return base, model, names, fuse


def add_tops(model, tops: list[int], host_bound: bool = False) -> None:
    """For each K of `tops`, 4 adapters in the top K layers only (AdapterDrop's), with
    LayerNorm deltas in those layers only: top{K}_0 .. top{K}_3."""
    from hubcli.core.config import HoulsbyConfig
    from hubcli.core.heads import HeadConfig

    head = HeadConfig("sequence_classification", 2, ("negative", "positive"))
    n_layers = model.num_layers
    for top in tops:
        for k in range(4):
            model.add_adapter(f"top{top}_{k}", HoulsbyConfig(
                bottleneck=2 if host_bound else 64, init_scale=0.05,
                layers=tuple(range(n_layers - top, n_layers)), layernorm="own-layers"), head)
    model.to(model.encoder.get_input_embeddings().weight.device).eval()


def sentences(n: int) -> list[str]:
    from hubcli.data import sample_dataset

    train, _ = sample_dataset()
    lines = train.read_text().splitlines()[1:]
    return [line.split("\t")[0] for line in lines[:n]]


def max_abs_diff(model, batch, per_row, blocks) -> float:
    """The largest difference between a routed result and the same adapter's own pass: each
    Parallel and every row of the mixed batch, by segments and gathered."""
    worst = 0.0
    alone = {}
    for n in {*per_row, *(n for block in blocks for n in block.children)}:
        model.activate(n)
        alone[n] = model(**batch)
    for model.gather in (False, True):
        for block in blocks:
            out = model.forward_parallel(**batch, block=block)
            worst = max(worst, *((out[n] - alone[n]).abs().max().item() for n in block.children))
        _, logits = model.forward_routed(**batch, per_row=per_row)
        for i, n in enumerate(per_row):
            worst = max(worst, (logits[i] - alone[n][i]).abs().max().item())
    return worst


def launches(fn: Callable[[], None]) -> dict[str, int]:
    """The operations one call of `fn` dispatches that launch a kernel on a GPU ("ops"), and
    those that wait for the device ("syncs"), counted by a dispatch mode: one launches when it
    writes in place or makes new storage; views (and `.to` a tensor's own dtype, `reshape`
    where it can view) make none, and allocating (`empty`) writes nothing."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    allocating = {"empty", "empty_like", "new_empty", "empty_strided"}
    syncing = {"_local_scalar_dense", "nonzero", "is_nonzero", "item"}

    def storages(tree) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in tree_leaves(tree)
                if isinstance(t, torch.Tensor)}

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = self.syncs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func._schema.name.split("::")[-1]
            if name not in allocating and (func._schema.is_mutable or not isinstance(
                    out, torch.Tensor | tuple | list) or storages(out) - storages((args, kwargs))):
                self.ops += 1
                self.syncs += name in syncing
            return out

    with Count() as count:
        fn()
    return {"ops": count.ops, "syncs": count.syncs}


def interleaved(variants: dict[str, Callable[[], None]], repeats: int,
                sync: Callable[[], None]) -> dict[str, list[float]]:
    """Each variant's seconds per call over `repeats` rounds of all of them in turn (A B C ...
    A B C ...), after one warm-up call each (stacks built, kernels chosen); `sync` waits for
    a device's queued work."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for f in variants.values():
        f()
    sync()
    for _ in range(repeats):
        for k, f in variants.items():
            t0 = time.perf_counter()
            f()
            sync()
            times[k].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--top", default="1,2,3",
                    help="layer counts K for the parallel_topK variants (comma-separated)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--host-bound", action="store_true",
                    help="a random base as deep as the packaged one but 12x narrower, "
                         "bottleneck 2: what is timed is the host's work per pass")
    args = ap.parse_args()
    tops = [int(k) for k in args.top.split(",") if k]
    import torch

    from hubcli.core.composition import Parallel

    if args.threads:
        torch.set_num_threads(args.threads)
    base, model, names, fuse = build(8, args.host_bound)
    model.to(args.device)
    texts = sentences(args.batch)
    batch = {k: v.to(args.device) for k, v in base.tokenizer(
        texts, padding=True, truncation=True, max_length=128, return_tensors="pt").items()}
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    per_row = [names[i % len(names)] for i in range(len(texts))]
    groups = {n: [i for i, m in enumerate(per_row) if m == n] for n in names}
    four = Parallel(*names[:4])
    with_fuse = [(*names, fuse.name)[i % (len(names) + 1)] for i in range(len(texts))]
    apart = [[i for i, n in enumerate(with_fuse) if (n == fuse.name) is mine]
             for mine in (False, True)]  # the single adapters' rows, the fusion's

    def one():
        model.activate(names[0])
        model(**batch)

    def bare():
        model.deactivate()
        model.encode(**batch)

    def mixed(gather, rows=per_row):
        def run():
            model.gather = gather
            model.forward_routed(**batch, per_row=rows)
        return run

    def naive():
        for n, rows in groups.items():
            model.activate(n)
            model(**{k: v[rows] for k, v in batch.items()})

    def parallel_of(block, gather):
        def run():
            model.gather = gather
            model.forward_parallel(**batch, block=block)
        return run

    def separately(block):
        def run():
            for n in block.children:
                model.activate(n)
                model(**batch)
        return run

    def fused():
        model.activate(fuse)
        model(**batch)

    def mixed_fuse_apart(gather):
        def run():
            model.gather = gather
            model.forward_routed(**{k: v[apart[0]] for k, v in batch.items()},
                                 per_row=[with_fuse[i] for i in apart[0]])
            model.activate(fuse)
            model(**{k: v[apart[1]] for k, v in batch.items()})
        return run

    blocks = {"": four, **{f"_top{top}": Parallel(*(f"top{top}_{k}" for k in range(4)))
                           for top in tops}}
    # two groups, each interleaved on its own, as a server sends one kind of traffic: the
    # mixed batch's over the 8 adapters, then the Parallels', the top-layer adapters added
    # for them (a gathered route numbers every adapter loaded: `gathered.py`)
    mixes = {"mixed": mixed(False), "mixed_gathered": mixed(True), "one": one,
             "bare": bare, "naive": naive, "fuse": fused,
             **{f"mixed_fuse{mode}": mixed(gather, with_fuse) for mode, gather in
                (("", False), ("_gathered", True))},
             **{f"mixed_fuse_apart{mode}": mixed_fuse_apart(gather) for mode, gather in
                (("", False), ("_gathered", True))}}
    parallels = {}
    for suffix, block in blocks.items():
        parallels[f"parallel{suffix}"] = parallel_of(block, False)
        parallels[f"parallel_gathered{suffix}"] = parallel_of(block, True)
        parallels[f"sep4{suffix}"] = separately(block)
    with torch.inference_mode():
        diff = max(max_abs_diff(model, batch, per_row, [four]),
                   max_abs_diff(model, batch, with_fuse, []))
        times = interleaved(mixes, args.repeats, sync)
        counts = {k: launches(f) for k, f in mixes.items()}
        add_tops(model, tops, args.host_bound)
        diff = max(diff, max_abs_diff(model, batch, per_row, blocks.values()))
        times.update(interleaved(parallels, args.repeats, sync))
        counts.update({k: launches(f) for k, f in parallels.items()})
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}

    def ratios(t: dict[str, float]) -> dict[str, float]:
        return {**{f"mixed{mode}_vs_{other}_throughput": round(t[other] / t[f"mixed{mode}"], 3)
                   for mode in ("", "_gathered") for other in ("one", "bare", "naive")},
                **{f"parallel4{mode}{suffix}_speedup_vs_4_passes":
                   round(t[f"sep4{suffix}"] / t[f"parallel{mode}{suffix}"], 3)
                   for suffix in blocks for mode in ("", "_gathered")},
                "fuse3_time_vs_bare": round(t["fuse"] / t["bare"], 3),
                **{f"mixed_fuse{mode}_vs_apart_throughput":
                   round(t[f"mixed_fuse_apart{mode}"] / t[f"mixed_fuse{mode}"], 3)
                   for mode in ("", "_gathered")}}

    print(json.dumps({
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "host_bound": args.host_bound,
        "batch": len(texts), "tokens_per_row": int(batch["input_ids"].shape[1]),
        "threads": torch.get_num_threads(), "repeats": args.repeats, "max_abs_diff": diff,
        "best_ms": {k: round(v * 1e3, 1) for k, v in best.items()},
        "median_ms": {k: round(v * 1e3, 1) for k, v in median.items()},
        "ratios_best": ratios(best), "ratios_median": ratios(median),
        "launches": counts,
        "ratios_launches": ratios({k: c["ops"] for k, c in counts.items()})}, indent=1))


if __name__ == "__main__":
    main()
