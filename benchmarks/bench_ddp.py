#!/usr/bin/env python3
"""Per-step cost of 2-process data parallel training (gloo, CPU) against 1 process doing one
rank's share: the 2-process run takes steps of a global batch B (B/2 per rank), the 1-process
run steps of B/2, both one thread per process (torchrun's default), fp32, packaged MiniLM-L6,
max length 64, no validation. On a 2-core machine the 2-process run cannot be faster per
example than the cores allow; what this shows is the overhead of synchronising: the
all-reduce of the trainable gradients once per step, and the extra process.

    python benchmarks/bench_ddp.py --train D/train.tsv [--batch 32] [--steps 40] [--repeats 2]

Prints one JSON line per run and a summary line. The step time is the global batch over the
examples/s the last --log-json line reports (training time only: start-up excluded). On a
shared machine those move with the neighbours' load, so the summary also times the one
synchronisation a step adds on its own: the gloo all-reduce of a flat float32 tensor of the
adapter's trainable parameter count between 2 processes (median of 50).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
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


def _allreduce_worker(rank: int, numel: int, port: int, out) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    flat = torch.ones(numel)
    times = []
    for _ in range(55):
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(sorted(times[5:])[len(times[5:]) // 2])
    dist.destroy_process_group()


def allreduce_ms(numel: int) -> float:
    """Median time of one 2-process gloo all-reduce of `numel` float32 values."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_allreduce_worker, args=(r, numel, port, out)) for r in (0, 1)]
    for proc in procs:
        proc.start()
    median = out.get(timeout=300)
    for proc in procs:
        proc.join()
    return 1e3 * median


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
                trainable = json.loads((Path(tmp) / f"run{nproc}" / "manifest.json").read_text()
                                       )["parameters"]["trainable"]
                print(json.dumps({"repeat": repeat, "processes": nproc, "global_batch": batch,
                                  "per_rank_batch": a.batch // 2, "step_ms": round(1e3 * t, 1)}))
    print(json.dumps({"trainable_parameters": trainable,
                      "allreduce_ms": round(allreduce_ms(trainable), 2),
                      "one_process_step_ms": round(1e3 * best[1], 1),
                      "two_process_step_ms": round(1e3 * best[2], 1),
                      "overhead": round(best[2] / best[1] - 1, 3),
                      "examples_per_s": {"1": round(a.batch / 2 / best[1], 1),
                                         "2": round(a.batch / best[2], 1)}}))


if __name__ == "__main__":
    main()
