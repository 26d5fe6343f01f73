#!/usr/bin/env python3
"""Peak memory (RSS) of `hub train --streaming` against the training file's size: a JSONL
file of synthetic review sentences is written at each size, and `hub train --streaming`
(packaged MiniLM-L6, batch 32, max length 64, 10 steps) runs on it in a child process whose
peak RSS the kernel reports (wait4's ru_maxrss). With --compare, the same run without
--streaming too (the whole file in memory), for the smallest size.

    python benchmarks/bench_streaming_memory.py --sizes 50,200,500 [--compare] [--dir /tmp]

Prints one JSON line per run. The files are removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("the film was a great fun dull long story with fine acting and a weak plot that "
         "never quite works but the cast is lovely food service slow friendly").split()


def write_jsonl(path: Path, megabytes: int) -> int:
    """A JSONL file of about `megabytes` MB; returns its number of lines."""
    rng = random.Random(0)
    target, size, lines = megabytes * 1_000_000, 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            chunk = "".join(json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(8, 30))),
                                        "label": rng.choice(("negative", "positive"))}) + "\n"
                            for _ in range(10_000))
            f.write(chunk)
            size += len(chunk)
            lines += 10_000
    return lines


def peak_rss_mb(args: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of `hub train ARGS` in a child process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "hubcli", "train", *args], env=env,
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"hub train failed: {args}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50,200,500", help="file sizes in MB")
    ap.add_argument("--compare", action="store_true", help="also without --streaming (smallest)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the files")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for mb in sizes:
            data = Path(tmp) / f"train-{mb}mb.jsonl"
            lines = write_jsonl(data, mb)
            modes = [True, False] if a.compare and mb == min(sizes) else [True]
            for stream in modes:
                out = Path(tmp) / "out"
                args = ["--train", str(data), "--out", str(out), "--overwrite", "--max-steps",
                        "10", "--batch-size", "32", "--max-length", "64", "--quiet",
                        *(["--streaming"] if stream else [])]
                rss, seconds = peak_rss_mb(args)
                print(json.dumps({"file_mb": round(data.stat().st_size / 1e6, 1),
                                  "examples": lines, "streaming": stream,
                                  "peak_rss_mb": round(rss, 1), "seconds": round(seconds, 1)}),
                      flush=True)
            data.unlink()


if __name__ == "__main__":
    main()
