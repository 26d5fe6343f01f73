#!/usr/bin/env python3
"""`hub serve` with two stacked adapters over two versions of one component's name, which the
model cannot hold at once: steady closed-loop traffic from C clients to the first ("busy"),
and one client for the second ("other") that waits as Retry-After says after a 503. Prints
one JSON line: each side's answers by HTTP status, and requests/s answered.

Before turns, the busy side kept the component for good while it had requests under way, and
the other was told to retry every time; with turns, each waits its turn and both are answered.

    python benchmarks/bench_turns.py [--clients 16] [--seconds 15] [--work /tmp/bench-turns]

On the packaged MiniLM-L6: a component trained for one epoch on the shipped sentiment
sample, its second version the same weights perturbed, and an adapter stacked on each (a few
steps: speed, not accuracy, is measured); written once under --work and reused.
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from collections import Counter
from pathlib import Path

from bench_serve import free_port, make_adapters, run_all, start_server


def make_pair(work: Path) -> tuple[Path, Path]:
    """Two adapters stacked on two versions of one component named "shared"."""
    import torch

    from hubcli.data import sample_dataset
    from hubcli.format import manifest as manifest_io
    from hubcli.local.adapterdir import read_adapter_weights, write_adapter_dir
    from hubcli.local.train import TrainSettings, train

    (seed,) = make_adapters(work, 1)
    train_tsv, _ = sample_dataset()
    stacked = []
    for version, noise in (("1.0.0", 0.0), ("2.0.0", 0.01)):
        component, out = work / f"shared-{version}", work / f"on-{version}"
        if not (component / "manifest.json").exists():
            g = torch.Generator().manual_seed(7)
            weights = {k: t + noise * torch.randn(t.shape, generator=g)
                       for k, t in read_adapter_weights(seed).items()}
            write_adapter_dir(component, {**manifest_io.read(seed), "name": "shared",
                                          "version": version}, weights)
        if not (out / "manifest.json").exists():
            train(TrainSettings(train=train_tsv, out=out, compose="stack",
                                components=(str(component),), max_steps=3, quiet=True,
                                allow_unsigned=True), log=lambda _m: None)
        stacked.append(out)
    return stacked[0], stacked[1]


def drive(port: int, busy: str, other: str, clients: int, seconds: float) -> dict:
    """C clients for `busy`, one for `other`, each waiting Retry-After after a 503."""
    counts = {"busy": Counter(), "other": Counter()}
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(side: str, name: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = json.dumps({"adapter": name, "inputs": ["a warm, gripping film"]})
        while time.perf_counter() < stop:
            conn.request("POST", "/v1/predict", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            with lock:
                counts[side][r.status] += 1
            if r.status == 503:
                time.sleep(float(r.getheader("Retry-After", "1")))

    wall = run_all([threading.Thread(target=client, args=("busy", busy)) for _ in range(clients)]
                   + [threading.Thread(target=client, args=("other", other))])
    return {"clients_busy": clients, "clients_other": 1, "seconds": round(wall, 1),
            **{side: dict(sorted(c.items())) for side, c in counts.items()},
            "answered_per_s": round(sum(c[200] for c in counts.values()) / wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-turns"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    busy, other = make_pair(args.work)
    port = free_port()
    # the other first: the busy one then displaces it, and holds the component at the start
    server = start_server([other, busy], [], port)
    try:
        print(json.dumps(drive(port, str(busy), str(other), args.clients, args.seconds)))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
