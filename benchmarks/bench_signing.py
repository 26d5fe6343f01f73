"""How long signing and verifying a ~3 MB bundle takes.

    .venv/bin/python benchmarks/bench_signing.py [--runs 9]

The bundle has the shape of a MiniLM-L6 adapter (hidden 384, 6 layers, bottleneck 64, adapters
after both sublayers, LayerNorm deltas, a 2-label head): about 3 MB of float32 weights. Prints
the median of `--runs` in-process runs for sign, verify (hub verify) and the attach check, the
one-off cost of importing model-signing, and the wall time of a cold `hub verify` process.
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


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HUB_HOME"] = str(Path(tmp) / "hub_home")
        from factories import make_adapter_dir

        from hubcli.bundle import make_bundle
        from hubcli.signing.policy import check_attach
        from hubcli.signing.sign import create_signing_key, sign_bundle
        from hubcli.signing.verify import verify_bundle

        directory = make_adapter_dir(Path(tmp) / "bundle", hidden=384, num_layers=6,
                                     bottleneck=64, name="bench-adapter")
        make_bundle(directory)
        create_signing_key(name="bench")
        size = sum(p.stat().st_size for p in directory.iterdir())

        start = time.perf_counter()
        import hubcli.signing.upstream  # noqa: F401  (the one-off cost every process pays once)
        import_ms = (time.perf_counter() - start) * 1000

        sign_ms = median_ms(lambda: sign_bundle(directory), args.runs)
        verify_ms = median_ms(lambda: verify_bundle(directory), args.runs)
        attach_ms = median_ms(lambda: check_attach(directory), args.runs)
        cold = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "from hubcli.cli.main import main; main()",
                            "verify", str(directory)], check=True, capture_output=True, cwd=ROOT)
            cold.append(time.perf_counter() - start)

    print(f"bundle: {size / 1e6:.2f} MB (manifest.json, adapter.safetensors, README.md, "
          f"model.sig); median of {args.runs} in-process runs")
    print(f"sign_bundle      {sign_ms:8.1f} ms")
    print(f"verify_bundle    {verify_ms:8.1f} ms")
    print(f"check_attach     {attach_ms:8.1f} ms")
    print(f"import model-signing (once per process)  {import_ms:8.1f} ms")
    print(f"`hub verify` in a fresh process (median of 3)  "
          f"{statistics.median(cold) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
