#!/usr/bin/env python3
"""AdapterFusion and stacking on the packaged MiniLM-L6, on a synthetic sentence-pair task
(one CPU thread by default, a few minutes):

- target task `same-topic`: two sentences, label 1 when both are about the same topic
  (6 topics, templated sentences; train and test drawn from disjoint word sets per topic, so
  the held-out test needs generalisation, not memorised words)
- other adapters: `topic` (which of the 6 topics, one sentence) and `sentiment` (positive or
  negative, one sentence, unrelated to the topic)

Figures printed (and with --json, one JSON object):
- accuracy on the held-out test: the target's own adapter alone vs `hub fuse` over
  [own, topic, sentiment] (the issue's target: fusion >= single)
- accuracy: a task adapter stacked on `topic` (`hub train --stack`) vs a plain one
  (target: within 1 point)
- training throughput (examples/s over an epoch, `TrainResult`; median of --rounds one-epoch
  runs each, taking turns): fusion vs single adapter on the same data (target: >= 0.5x)
- `hub predict` as a whole process (hub predict DIR TEXT --pair PAIR, median of
  --runs, taking turns): fused vs single (target: <= 1.3x)

    python benchmarks/bench_fusion.py [--out /tmp/bench-fusion] [--threads 1] [--runs 5]
                                      [--rounds 3] [--seed 0] [--speed-only]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOPICS = {
    "sports": ["match", "goal", "team", "coach", "stadium", "referee", "player", "league",
               "tournament", "striker", "race", "medal"],
    "food": ["soup", "bread", "recipe", "kitchen", "chef", "salad", "dessert", "oven", "noodles",
             "sauce", "bakery", "menu"],
    "weather": ["rain", "storm", "forecast", "cloud", "thunder", "snow", "wind", "sunshine",
                "fog", "drizzle", "heatwave", "frost"],
    "music": ["guitar", "concert", "song", "album", "drummer", "melody", "choir", "band",
              "piano", "lyrics", "orchestra", "singer"],
    "money": ["bank", "loan", "budget", "salary", "invoice", "stock", "savings", "tax",
              "mortgage", "interest", "pension", "debt"],
    "travel": ["flight", "hotel", "passport", "airport", "luggage", "beach", "train", "tourist",
               "map", "cruise", "visa", "suitcase"],
}
GOOD = ["wonderful", "great", "lovely", "excellent", "delightful", "superb"]
BAD = ["awful", "terrible", "dreadful", "boring", "horrible", "disappointing"]
TEMPLATES = ["the {a} and the {b} were {s}", "i thought the {a} was {s} after the {b}",
             "my {a} felt {s} because of the {b}", "everyone said the {b} near the {a} was {s}",
             "what a {s} {a}, and the {b} too", "the {a} was {s} this week"]


def sentence(rng: random.Random, topic: str, words: list[str], sentiment: int) -> str:
    a, b = rng.sample(words, 2)
    s = rng.choice(GOOD if sentiment else BAD)
    return rng.choice(TEMPLATES).format(a=a, b=b, s=s)


def split_words(held_out: bool) -> dict[str, list[str]]:
    """Train on the first 8 words of each topic, test on the last 4."""
    return {t: (w[8:] if held_out else w[:8]) for t, w in TOPICS.items()}


def write_data(folder: Path, seed: int = 0) -> dict[str, Path]:
    rng = random.Random(seed)
    names = list(TOPICS)
    out = {}

    def pairs(n: int, held_out: bool) -> list[tuple[str, str, int]]:
        words = split_words(held_out)
        rows = []
        for i in range(n):
            t1 = rng.choice(names)
            same = i % 2
            t2 = t1 if same else rng.choice([t for t in names if t != t1])
            rows.append((sentence(rng, t1, words[t1], rng.randrange(2)),
                         sentence(rng, t2, words[t2], rng.randrange(2)), same))
        return rows

    def write(name: str, header: list[str], rows: list[tuple]) -> None:
        path = folder / f"{name}.tsv"
        path.write_text("\t".join(header) + "\n" + "".join(
            "\t".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
        out[name] = path

    write("pair_train", ["sentence1", "sentence2", "label"], pairs(300, False))
    write("pair_dev", ["sentence1", "sentence2", "label"], pairs(150, False))
    write("pair_test", ["sentence1", "sentence2", "label"], pairs(600, True))
    words = split_words(False)
    topic_rows, sentiment_rows = [], []
    for _ in range(1200):
        t, s = rng.choice(names), rng.randrange(2)
        topic_rows.append((sentence(rng, t, words[t], s), t))
        t, s = rng.choice(names), rng.randrange(2)
        sentiment_rows.append((sentence(rng, t, words[t], s), "positive" if s else "negative"))
    write("topic_train", ["sentence", "label"], topic_rows[:1000])
    write("topic_dev", ["sentence", "label"], topic_rows[1000:])
    write("sentiment_train", ["sentence", "label"], sentiment_rows[:1000])
    write("sentiment_dev", ["sentence", "label"], sentiment_rows[1000:])
    return out


def train(data: dict[str, Path], out: Path, train_name: str, *, pair: bool, **kw):
    from hubcli.local.train import TrainSettings, train as run
    from hubcli.tasks.base import Columns

    columns = Columns(text="sentence1", pair="sentence2") if pair else Columns(text="sentence")
    dev = train_name.replace("_train", "_dev")
    t0 = time.perf_counter()
    result = run(TrainSettings(train=data[train_name], validation=data[dev], out=out,
                               columns=columns, quiet=True, max_length=48, **kw),
                 log=lambda _m: None)
    best = result.history[(result.best_epoch or len(result.history)) - 1]
    print(f"  {out.name}: dev accuracy {best.get('accuracy', float('nan')):.4f}, "
          f"{result.examples_per_second:.1f} examples/s, {time.perf_counter() - t0:.0f} s",
          flush=True)
    return result


def test_accuracy(adapter: Path, data: dict[str, Path]) -> float:
    from hubcli.local.inference import load_predictor
    from hubcli.tasks.base import Columns

    predictor = load_predictor(adapter)
    examples = predictor.task.read(data["pair_test"], columns=Columns(text="sentence1",
                                                                    pair="sentence2"))
    return predictor.evaluate(examples)["accuracy"]


def predict_seconds(adapters: dict[str, Path], runs: int, threads: int) -> dict[str, float]:
    """Median wall time of `hub predict` as a whole process (start-up, verify, load, predict)
    per adapter, the adapters taking turns so a noisy neighbour slows them alike."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    times: dict[str, list[float]] = {n: [] for n in adapters}
    for _ in range(runs):
        for name, adapter in adapters.items():
            cmd = [str(Path(sys.executable).parent / "hub"), "predict", str(adapter),
                   "the goal in the last match was superb", "--pair",
                   "a great team and a great coach"]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, capture_output=True)
            times[name].append(time.perf_counter() - t0)
    return {n: round(statistics.median(t), 3) for n, t in times.items()}


def train_throughput(data: dict[str, Path], root: Path, components: tuple[str, ...],
                     rounds: int) -> dict[str, float]:
    """Median training examples/s over `rounds` one-epoch runs on the pair data, single
    adapter and fusion taking turns (the same data, batch size and precision)."""
    speeds: dict[str, list[float]] = {"single": [], "fusion": []}
    for r in range(rounds):
        speeds["single"].append(train(data, root / "speed" / f"single-{r}", "pair_train",
                                      pair=True, epochs=1).examples_per_second)
        speeds["fusion"].append(train(data, root / "speed" / f"fusion-{r}", "pair_train",
                                      pair=True, epochs=1, compose="fuse",
                                      components=components).examples_per_second)
    return {n: round(statistics.median(v), 1) for n, v in speeds.items()}


def quality(data: dict[str, Path], root: Path, components: tuple[str, ...], seed: int) -> None:
    """Train the three adapters, the fusions (the paper's lr 5e-5, and 1e-3) and the stack."""
    train(data, root / "same-topic", "pair_train", pair=True, epochs=10, seed=seed)
    train(data, root / "topic", "topic_train", pair=False, epochs=3, seed=seed)
    train(data, root / "sentiment", "sentiment_train", pair=False, epochs=3, seed=seed)
    train(data, root / "same-topic-fusion", "pair_train", pair=True, compose="fuse",
          components=components, seed=seed)
    train(data, root / "same-topic-fusion-lr1e-3", "pair_train", pair=True, compose="fuse",
          components=components, lr=1e-3, seed=seed)
    train(data, root / "same-topic-on-topic", "pair_train", pair=True, epochs=10,
          compose="stack", components=(str(root / "topic"),), seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="keep data and adapters here (default: temp)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="data and training seed")
    parser.add_argument("--runs", type=int, default=5, help="hub predict runs per adapter")
    parser.add_argument("--rounds", type=int, default=3, help="throughput runs per variant")
    parser.add_argument("--speed-only", action="store_true",
                        help="reuse the adapters an earlier run left in --out")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-fusion-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HUB_HOME", str(root / "hub_home"))
    data = write_data(root, args.seed)
    print(f"data and adapters in {root}", flush=True)
    components = tuple(str(root / n) for n in ("same-topic", "topic", "sentiment"))
    if not args.speed_only:
        quality(data, root, components, args.seed)
    figures = {
        "test_examples": 600,
        "accuracy": {n: round(test_accuracy(root / n, data), 4) for n in (
            "same-topic", "same-topic-fusion", "same-topic-fusion-lr1e-3",
            "same-topic-on-topic")},
        "train_examples_per_s": train_throughput(data, root, components, args.rounds),
        "predict_process_s": predict_seconds({n: root / n for n in (
            "same-topic", "same-topic-fusion")}, args.runs, args.threads),
    }
    t, p = figures["train_examples_per_s"], figures["predict_process_s"]
    figures["ratios"] = {"fusion_vs_single_train_throughput": round(t["fusion"] / t["single"], 3),
                         "fused_vs_single_predict_time": round(p["same-topic-fusion"]
                                                               / p["same-topic"], 3)}
    if args.json:
        print(json.dumps(figures))
        return
    acc = figures["accuracy"]
    print(f"held-out accuracy ({figures['test_examples']} pairs, unseen topic words):")
    for name, value in acc.items():
        print(f"  {name:28s} {value:.4f}")
    print(f"train throughput (median of {args.rounds} one-epoch runs each, taking turns): single "
          f"{t['single']} ex/s, fusion {t['fusion']} ex/s "
          f"({figures['ratios']['fusion_vs_single_train_throughput']}x)")
    print(f"hub predict process: single {p['same-topic']} s, fused {p['same-topic-fusion']} s "
          f"({figures['ratios']['fused_vs_single_predict_time']}x)")


if __name__ == "__main__":
    main()
