#!/usr/bin/env python3
"""`hub predict ADAPTER "one sentence"` vs the peer's equivalent (benchmarks/peer_predict.py,
the `adapters` library), as whole processes, interleaved round by round in one sitting.

    .venv/bin/python benchmarks/bench_startup.py [--rounds 7] [--peer-python /tmp/anchor-venv/bin/python]

Makes what it needs in a temp folder (a signed one-epoch hub adapter on the shipped sentiment
sample, the peer's adapter) with its own HUB_HOME, warms both once (the first attach verifies
the signature in full and remembers the verdict, as any second run on a machine does), then
times N rounds of each and prints min and median per side and their ratio (goal: <= 0.5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUB = Path(sys.executable).with_name("hub")
TEXT = "a gripping, beautifully acted film"


def run(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def prepare(work: Path, env: dict, peer_python: str) -> tuple[list[str], list[str]]:
    adapter = work / "hub-adapter"
    data = ROOT / "hubcli" / "data" / "sentiment_train.tsv"
    for cmd in ([str(HUB), "train", "--train", str(data), "--out", str(adapter), "--epochs", "1",
                 "--max-length", "64", "--quiet"],
                [str(HUB), "keygen"], [str(HUB), "bundle", str(adapter)],
                [str(HUB), "sign", str(adapter)],
                [peer_python, str(ROOT / "benchmarks" / "peer_predict.py"),
                 str(work / "peer-adapter"), "--save"]):
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL)
    return ([str(HUB), "predict", str(adapter), TEXT],
            [peer_python, str(ROOT / "benchmarks" / "peer_predict.py"),
             str(work / "peer-adapter"), TEXT])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--peer-python", default="/tmp/anchor-venv/bin/python")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "HUB_HOME": str(work / "home"), "HF_HUB_OFFLINE": "1"}
        hub_cmd, peer_cmd = prepare(work, env, a.peer_python)
        run(hub_cmd, env), run(peer_cmd, env)  # warm the page cache and the verdict
        times: dict[str, list[float]] = {"hub": [], "peer": []}
        for i in range(a.rounds):
            order = [("hub", hub_cmd), ("peer", peer_cmd)]
            for name, cmd in order if i % 2 == 0 else reversed(order):
                times[name].append(run(cmd, env))
    for name, values in times.items():
        print(f"{name:5s} min {min(values):.2f} s  median {statistics.median(values):.2f} s  "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    print(f"ratio hub/peer: min {min(times['hub']) / min(times['peer']):.2f}x  "
          f"median {statistics.median(times['hub']) / statistics.median(times['peer']):.2f}x  "
          "(goal <= 0.5x)")


if __name__ == "__main__":
    main()
