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
    from hubcli.local.inference import run_model

    t0 = time.perf_counter()
    feats = task.encode(examples, tokenizer, labels, 128, with_targets=False)
    preds = run_model(model, task, feats, examples, labels, batch_size=64)
    return len(examples) / (time.perf_counter() - t0), preds


def paired_slowdown(model, name: str, task, feats: list[dict], repeats: int) -> float:
    """Forward time with the adapter over the bare base's, batch by batch.

    The bare base is the same model with every adapter site switched off and only the head
    kept. Each batch runs both ways back to back and keeps its fastest time of `repeats`, so
    a noisy neighbour (bursts of seconds on these machines) slows both sides alike; timing
    whole passes over the data set one after the other gave anything from -4% to +13%.
    """
    import torch

    from hubcli.local.batching import inference_batches

    batches = [task.collate([feats[i] for i in idx]) for idx in inference_batches(feats, 64)]
    best = {True: [float("inf")] * len(batches), False: [float("inf")] * len(batches)}
    with torch.inference_mode():
        for _ in range(repeats):
            for k, b in enumerate(batches):
                for with_adapter in (True, False):
                    model.activate(name)
                    if not with_adapter:
                        model.deactivate()
                        model.active = name  # keep the head
                    t0 = time.perf_counter()
                    model(b["input_ids"], b["attention_mask"], b.get("token_type_ids"))
                    best[with_adapter][k] = min(best[with_adapter][k], time.perf_counter() - t0)
    return sum(best[True]) / sum(best[False]) - 1


def main() -> None:
    from hubcli.local import precision

    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, type=Path)
    ap.add_argument("--dev", required=True, type=Path)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--full-finetune", action="store_true")
    ap.add_argument("--precision", choices=precision.CHOICES, default="auto",
                    help="training precision, as `hub train --precision` (default: auto)")
    ap.add_argument("--repeats", type=int, default=5, help="inference timings to take the best of")
    a = ap.parse_args()

    from hubcli.local.train import TrainSettings, train

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
        from hubcli.local.attach import attach_to_fresh_base, verify_adapter
        from hubcli.tasks import get_task

        bundle = verify_adapter(out, allow_unsigned=True)
        model, loaded = attach_to_fresh_base(bundle)
        manifest = bundle.manifest
        task, labels = get_task("classification"), manifest["head"]["labels"]
        dev = task.read(a.dev)
        speeds = [infer_speed(model, task, loaded.tokenizer, dev, labels) for _ in range(a.repeats)]
        row["infer_examples_per_s"] = round(max(s for s, _ in speeds), 2)
        row["dev_accuracy"] = round(task.metrics(speeds[0][1], dev, labels)["accuracy"], 4)
        feats = task.encode(dev, loaded.tokenizer, labels, 128, with_targets=False)
        row["adapter_infer_slowdown"] = round(paired_slowdown(model, manifest["name"], task, feats,
                                                              a.repeats), 4)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
