"""ONNX Runtime against PyTorch for a MiniLM-L6 adapter: batch-64 throughput in process, and
one sentence through `hub predict` as a whole process (start-up included).

    .venv/bin/python benchmarks/bench_onnx.py [--runs 7]

The adapter has the shape of a real one (hidden 384, 6 layers, bottleneck 64, random weights,
tests/factories.py) on the packaged all-MiniLM-L6-v2. The ONNX graph is exported once first
(what the first `hub predict --runtime onnx` does, then cached). The two runtimes alternate
within each round, so load on a shared machine hits both alike; figures are medians.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
HUB = str(Path(sys.executable).parent / "hub")


def make_adapter(directory: Path) -> Path:
    from factories import make_adapter_dir

    from hubcli.base.ref import DEFAULT_BASE_NAME, packaged_base_hash

    return make_adapter_dir(directory, hidden=384, num_layers=6, bottleneck=64,
                            name="bench-sst", base_model={"name": DEFAULT_BASE_NAME,
                                                          "content_hash": packaged_base_hash(),
                                                          "num_parameters": 22_713_216},
                            training={"max_length": 128})


def texts(n: int) -> list[str]:
    from hubcli.data import sample_dataset

    lines = Path(sample_dataset()[1]).read_text().splitlines()[1:]
    return [line.split("\t")[0] for line in lines][:n]


def throughput(adapter: Path, runs: int) -> dict[str, float]:
    from hubcli.api import load_onnx_predictor
    from hubcli.local.inference import load_predictor

    predictors = {"torch": load_predictor(adapter, allow_unsigned=True),
                  "onnx": load_onnx_predictor(adapter, allow_unsigned=True)}
    batch = texts(64)
    examples = {k: [p.task.parse_input(t) for t in batch] for k, p in predictors.items()}
    times: dict[str, list[float]] = {k: [] for k in predictors}
    for _ in range(runs + 1):  # the first round warms up and is dropped
        for k, p in predictors.items():
            t = time.perf_counter()
            p.predict(examples[k])
            times[k].append(time.perf_counter() - t)
    return {k: len(batch) / statistics.median(v[1:]) for k, v in times.items()}


def whole_process(adapter: Path, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"torch": [], "onnx": []}
    for _ in range(runs):
        for runtime in times:
            t = time.perf_counter()
            subprocess.run([HUB, "predict", str(adapter), "a fine film", "--runtime", runtime,
                            "--allow-unsigned"], check=True, capture_output=True)
            times[runtime].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HUB_HOME"] = str(Path(tmp) / "home")
        adapter = make_adapter(Path(tmp) / "bench-sst")
        t = time.perf_counter()
        subprocess.run([HUB, "predict", str(adapter), "x", "--runtime", "onnx",
                        "--allow-unsigned"], check=True, capture_output=True)
        print(f"first --runtime onnx call (export + cache): {time.perf_counter() - t:.2f} s")
        rates = throughput(adapter, args.runs)
        print(f"batch-64 throughput, in process (median of {args.runs}): " + ", ".join(
            f"{k} {v:.0f} sentences/s" for k, v in rates.items())
            + f"; onnx/torch {rates['onnx'] / rates['torch']:.2f}x")
        walls = whole_process(adapter, args.runs)
        print(f"`hub predict` one sentence, whole process (median of {args.runs}): " + ", ".join(
            f"{k} {v:.2f} s" for k, v in walls.items())
            + f"; torch/onnx {walls['torch'] / walls['onnx']:.2f}x")


if __name__ == "__main__":
    main()
