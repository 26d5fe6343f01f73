#!/usr/bin/env python3
"""Gathered routing under a server's traffic: N Houlsby adapters loaded on the packaged
MiniLM-L6 (bottleneck 64), each batch of 64 short sentences routed row by row to adapters drawn
at random, so that each batch mixes a different set of them. Timed (fp32, inference mode):

- fixed:  the first batch's mix, every time (the stacks a site keeps always fit)
- varied: a new mix each time, from a rotation of `--mixes` (more than a site keeps)

both gathered (`AdapterModel.gather`, a GPU's default: every site runs all its adapters at once
over stacked weights). A site's stacks number every adapter loaded, so any mix of most of them
reads the same stacks: varied should cost what fixed does. Were they per mix, each new mix
would rebuild every site's (`gathered.py`). The two run interleaved, `--repeats` rounds; the
best and the median of each are printed with their ratio (fixed time / varied time).

With `--host-bound`, the random narrow base of `bench_routing.py --host-bound`: what is timed is
the host's work per pass, the bound of a GPU at this batch size.

    python benchmarks/bench_mixes.py [--adapters 32] [--mixes 12] [--repeats 9] [--threads N]
                                     [--device cuda] [--host-bound]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from bench_routing import build, interleaved, sentences


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapters", type=int, default=32)
    ap.add_argument("--mixes", type=int, default=12, help="distinct mixes the varied run cycles")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--host-bound", action="store_true",
                    help="a random base as deep as the packaged one but 12x narrower, "
                         "bottleneck 2: what is timed is the host's work per pass")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    base, model, names, _fuse = build(args.adapters, args.host_bound)
    model.to(args.device)
    model.gather = True
    texts = sentences(args.batch)
    batch = {k: v.to(args.device) for k, v in base.tokenizer(
        texts, padding=True, truncation=True, max_length=128, return_tensors="pt").items()}
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    rng = random.Random(0)
    mixes = [[rng.choice(names) for _ in texts] for _ in range(args.mixes)]
    turn = iter(range(1 << 62))

    def fixed():
        model.forward_routed(**batch, per_row=mixes[0])

    def varied():
        model.forward_routed(**batch, per_row=mixes[next(turn) % len(mixes)])

    with torch.inference_mode():
        times = interleaved({"fixed": fixed, "varied": varied}, args.repeats, sync)
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "host_bound": args.host_bound, "adapters": args.adapters, "batch": len(texts),
        "distinct_mixes": len({frozenset(m) for m in mixes}),
        "adapters_per_batch": statistics.mean(len(set(m)) for m in mixes),
        "threads": torch.get_num_threads(), "repeats": args.repeats,
        "best_ms": {k: round(v * 1e3, 2) for k, v in best.items()},
        "median_ms": {k: round(v * 1e3, 2) for k, v in median.items()},
        "varied_vs_fixed_throughput": {"best": round(best["fixed"] / best["varied"], 3),
                                       "median": round(median["fixed"] / median["varied"], 3)},
    }, indent=1))


if __name__ == "__main__":
    main()
