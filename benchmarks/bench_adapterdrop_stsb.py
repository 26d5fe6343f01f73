#!/usr/bin/env python3
"""What AdapterDrop's adapters cost in accuracy, on real held-out data: STS-B regression
(the split and training of `bench_fusion_stsb.py`: --train-pairs of its train split, the best
of --epochs on 500 dev pairs, Pearson on the whole test split), trained

- in every layer (Houlsby: `--layernorm delta`, the default),
- in the top K layers only with `--layernorm own-layers` (K from --top), which a Parallel of
  such adapters shares the layers below of (`bench_routing.py` times that).

    python benchmarks/bench_adapterdrop_stsb.py [--seeds 0,1,2] [--top 3,2] [--train-pairs 1000]
                                                [--epochs 5] [--out DIR] [--threads 2] [--json]

Adapters already trained in --out for the same seed, --train-pairs and --epochs are reused.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from bench_fusion_stsb import arguments, prepare, setup, test_pearson, train

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_seed(stsb: Path, root: Path, seed: int, n_train: int, epochs: int, tops: list[int],
             num_layers: int) -> dict[str, float]:
    root.mkdir(parents=True, exist_ok=True)
    data = prepare(stsb, root, seed, n_train)
    pair = {"train": data["train"], "validation": data["dev"], "task": "regression",
            "seed": seed, "epochs": epochs}
    runs = {"every layer": {}}
    runs.update({f"top {k}": {"layers": tuple(range(num_layers - k, num_layers)),
                              "layernorm": "own-layers"} for k in tops})
    out = {}
    for name, options in runs.items():
        folder = root / name.replace(" ", "-")
        train(folder, **pair, **options)
        out[name] = test_pearson(folder, data["test"])["pearson"]
    return out


def main() -> None:
    ap = arguments(__doc__.split("\n\n")[0], "/tmp/bench-adapterdrop-stsb", "for every run")
    ap.add_argument("--top", default="3,2", help="layer counts K (comma-separated)")
    args = ap.parse_args()
    from hubcli.base.load import load_base

    stsb, folders = setup(args)
    num_layers = load_base(None).encoder.config.num_hidden_layers
    tops = [int(k) for k in args.top.split(",") if k]
    results = {}
    for seed, folder in folders.items():
        results[seed] = run_seed(stsb, folder, seed, args.train_pairs, args.epochs, tops,
                                 num_layers)
        if not args.json:
            print(f"seed {seed}: test Pearson " + ", ".join(
                f"{n} {p:.4f}" for n, p in results[seed].items()), flush=True)
    names = list(next(iter(results.values())))
    mean = {n: round(statistics.mean(r[n] for r in results.values()), 4) for n in names}
    if args.json:
        print(json.dumps({"seeds": results, "mean": mean}, indent=1))
    else:
        print("mean: " + ", ".join(f"{n} {p:.4f}" for n, p in mean.items()))


if __name__ == "__main__":
    main()
