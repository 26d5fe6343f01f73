#!/usr/bin/env python3
"""Per-step cost of 2-process data parallel training (gloo, CPU) against 1 process doing one
rank's share: the 2-process run takes steps of a global batch B (B/2 per rank), the 1-process
run steps of B/2, both one thread per process (torchrun's default), fp32, packaged MiniLM-L6,
max length 64, no validation. On a 2-core machine the 2-process run cannot be faster per
example than the cores allow; what this shows is the overhead of synchronising: the
all-reduce of the trainable gradients once per step, and the extra process.

    python benchmarks/bench_ddp.py --train D/train.tsv [--batch 32] [--steps 40] [--repeats 2]

Prints one JSON line per run and a summary line. The step time is the global batch over the
examples/s the last --log-json line reports (training time only: start-up excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def step_time(train: Path, batch: int, steps: int, nproc: int, tmp: Path) -> float:
    out, log = tmp / f"run{nproc}", tmp / f"log{nproc}.jsonl"
    log.unlink(missing_ok=True)
    command = [sys.executable, "-m", "hubcli", "train", "--train", str(train), "--out", str(out),
               "--overwrite", "--batch-size", str(batch), "--max-steps", str(steps),
               "--max-length", "64", "--precision", "fp32", "--quiet", "--log-json", str(log),
               "--log-every", str(steps), "--nproc", str(nproc)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    last = [row for row in map(json.loads, log.read_text().splitlines())
            if "examples_per_s" in row][-1]
    return batch / last["examples_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=32, help="the 2-process run's global batch")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2, help="alternating pairs; best kept")
    a = ap.parse_args()
    best = {1: float("inf"), 2: float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(a.repeats):
            for nproc, batch in ((1, a.batch // 2), (2, a.batch)):
                t = step_time(a.train, batch, a.steps, nproc, Path(tmp))
                best[nproc] = min(best[nproc], t)
                print(json.dumps({"repeat": repeat, "processes": nproc, "global_batch": batch,
                                  "per_rank_batch": a.batch // 2, "step_ms": round(1e3 * t, 1)}))
    print(json.dumps({"one_process_step_ms": round(1e3 * best[1], 1),
                      "two_process_step_ms": round(1e3 * best[2], 1),
                      "overhead": round(best[2] / best[1] - 1, 3),
                      "examples_per_s": {"1": round(a.batch / 2 / best[1], 1),
                                         "2": round(a.batch / best[2], 1)}}))


if __name__ == "__main__":
    main()
