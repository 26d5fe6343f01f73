#!/usr/bin/env python3
"""Training and inference throughput of our Houlsby adapter, with the settings of the peer's
benchmark (../shared/bench/anchor_adapters.py): packaged MiniLM-L6, batch 32, max length 64,
bottleneck 64, 1 epoch, lr 1e-3 (5e-5 full), warmup 10% then linear decay, seed 0; inference in
batches of 64 at max length 128, always fp32. Training precision as `hub train` (auto: bf16
autocast on CPUs with native bf16); `--precision fp32` for the float32 figure. Prints one JSON
line, like the peer's script.

    python benchmarks/bench_train.py --train D/train.tsv --dev D/dev.tsv [--full-finetune]

Run benchmarks/compare_peer.sh to measure both tools in one sitting and print ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def infer_speed(model, task, tokenizer, examples, labels) -> tuple[float, list[dict]]:
    from hubcli.inference import run_model

    t0 = time.perf_counter()
    feats = task.encode(examples, tokenizer, labels, 128, with_targets=False)
    preds = run_model(model, task, feats, examples, labels, batch_size=64)
    return len(examples) / (time.perf_counter() - t0), preds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, type=Path)
    ap.add_argument("--dev", required=True, type=Path)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--full-finetune", action="store_true")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto",
                    help="training precision, as `hub train --precision` (default: auto)")
    ap.add_argument("--repeats", type=int, default=5, help="inference timings to take the best of")
    a = ap.parse_args()

    from hubcli import precision
    from hubcli.train import TrainSettings, train

    out = Path(tempfile.mkdtemp()) / "bench-adapter"
    s = TrainSettings(train=a.train, validation=None, out=out, epochs=a.epochs, batch_size=32,
                      max_length=64, bottleneck=64, seed=0, full_finetune=a.full_finetune,
                      precision=a.precision, quiet=True)
    result = train(s, log=lambda _m: None)
    row = {"tool": "hub", "mode": "full" if a.full_finetune else "adapter",
           "precision": precision.resolve(a.precision),
           "trainable_params": result.parameters["trainable"],
           "train_examples_per_s": round(result.examples_per_second, 2)}
    if not a.full_finetune:
        from hubcli.attach import attach_to_fresh_base
        from hubcli.tasks import get_task

        model, loaded, manifest = attach_to_fresh_base(out, allow_unsigned=True)
        task, labels = get_task("classification"), manifest["head"]["labels"]
        dev = task.read(a.dev)
        # the bare base's cost: the same model with every adapter site switched off and only
        # the head kept, in the same process and memory; timed alternately with the adapter
        # so that a noisy neighbour slows both alike
        name, with_adapter, bare = manifest["name"], [], []
        for _ in range(a.repeats):
            model.activate(name)
            with_adapter.append(infer_speed(model, task, loaded.tokenizer, dev, labels))
            model.deactivate()
            model.active = name
            bare.append(infer_speed(model, task, loaded.tokenizer, dev, labels)[0])
        row["infer_examples_per_s"] = round(max(s for s, _ in with_adapter), 2)
        row["dev_accuracy"] = round(task.metrics(with_adapter[0][1], dev, labels)["accuracy"], 4)
        row["base_infer_examples_per_s"] = round(max(bare), 2)
        row["adapter_infer_slowdown"] = round(
            row["base_infer_examples_per_s"] / row["infer_examples_per_s"] - 1, 4)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
