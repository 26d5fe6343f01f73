#!/usr/bin/env python3
"""`hub serve` under closed-loop HTTP load: N Houlsby adapters (bottleneck 64) on the packaged
MiniLM-L6, C clients each sending one request after another for T seconds, one sentence per
request for an adapter chosen uniformly at random. Prints one JSON line per (mode, clients):
requests/s, p50/p90/p99 latency (ms), errors, and the server's mean requests per pass.

Modes (each a fresh `hub serve` subprocess on a free port, run one after another):
- batched:   mixed dynamic batching (the default server)
- unbatched: `--no-batching`, every request its own forward pass
- base:      the same server, every request for `__base__` (the untouched base; its answer is
             an embedding, so a bigger body than a label)

    python benchmarks/bench_serve.py [--adapters 16] [--clients 1,8,32] [--seconds 30]
        [--modes batched,unbatched,base] [--work /tmp/bench-serve]

The adapters are one adapter trained for one epoch on the shipped sentiment sample, copied N
times with its weights perturbed (speed, not accuracy, is measured here); they are written
once under --work and reused.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = ("a warm gripping film the plot drags but the cast is superb dull lifeless script "
         "beautifully acted moving story clumsy direction sharp funny tedious charming").split()
MODES = {"batched": [], "unbatched": ["--no-batching"], "base": []}


def make_adapters(work: Path, n: int) -> list[Path]:
    """N adapter folders a0..a{n-1} under `work` (trained and copied once)."""
    import torch

    from hubcli.data import sample_dataset
    from hubcli.format import manifest as manifest_io
    from hubcli.local.adapterdir import read_adapter_weights, write_adapter_dir
    from hubcli.local.train import TrainSettings, train

    seed_dir = work / "trained"
    if not (seed_dir / "manifest.json").exists():
        train_tsv, _ = sample_dataset()
        train(TrainSettings(train=train_tsv, out=seed_dir, epochs=1, quiet=True),
              log=lambda _m: None)
    manifest, weights = manifest_io.read(seed_dir), read_adapter_weights(seed_dir)
    folders = []
    for k in range(n):
        out = work / f"a{k}"
        if not (out / "manifest.json").exists():
            g = torch.Generator().manual_seed(k)
            noisy = {name: t + 0.01 * torch.randn(t.shape, generator=g)
                     for name, t in weights.items()}
            write_adapter_dir(out, {**manifest, "name": f"a{k}"}, noisy)
        folders.append(out)
    return folders


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folders: list[Path], extra: list[str], port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from hubcli.cli.main import main; main()", "serve",
           *map(str, folders), "--port", str(port), "--allow-unsigned", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/ready")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not become ready")


def drive(port: int, names: list[str], clients: int, seconds: float) -> dict:
    """Closed-loop load; latencies of answered requests, errors counted apart."""
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(k: int) -> None:
        rng = random.Random(k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.perf_counter() < stop:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20)))
            body = json.dumps({"adapter": rng.choice(names), "inputs": [text]})
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/predict", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
            except OSError:
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            with lock:
                if ok:
                    lat.append(time.perf_counter() - t0)
                else:
                    errors[0] += 1

    wall = run_all([threading.Thread(target=client, args=(k,)) for k in range(clients)])
    lat.sort()

    def q(p: float) -> float | None:
        return round(1000 * lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

    return {"clients": clients, "seconds": round(wall, 1), "requests": len(lat),
            "requests_per_s": round(len(lat) / wall, 1), "p50_ms": q(0.5), "p90_ms": q(0.9),
            "p99_ms": q(0.99), "errors": errors[0]}


def run_all(threads: list[threading.Thread]) -> float:
    """Start `threads` together and wait for them all; the seconds they took."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def passes(port: int) -> tuple[float, float]:
    """(requests, forward passes) the server has run so far, from /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("hub_serve_batch_requests_")}
    return values["hub_serve_batch_requests_sum"], values["hub_serve_batch_requests_count"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adapters", type=int, default=16)
    ap.add_argument("--clients", default="32", help="comma-separated client counts")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--modes", default="batched,unbatched,base")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-serve"))
    ap.add_argument("--server-args", default="", help="extra `hub serve` options, space-separated")
    a = ap.parse_args()
    folders = make_adapters(a.work, a.adapters)
    for mode in a.modes.split(","):
        port = free_port()
        proc = start_server(folders, MODES[mode] + a.server_args.split(), port)
        names = ["__base__"] if mode == "base" else [str(f) for f in folders]
        try:
            for clients in [int(c) for c in a.clients.split(",")]:
                before = passes(port)
                row = drive(port, names, clients, a.seconds)
                done, runs = (x - y for x, y in zip(passes(port), before))
                print(json.dumps({"mode": mode, "adapters": a.adapters, **row,
                                  "requests_per_pass": round(done / runs, 2) if runs else None}),
                      flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
