#!/usr/bin/env python3
"""Peak memory (RSS) and time for very long inputs, each in its own process:

1. `hub predict ADAPTER --json` with one 50 MB line on stdin (whole process);
2. reading and encoding a JSONL file whose second line holds a 50 MB text (the training path:
   Classification.read + encode with the packaged base's tokenizer, max length 128);
3. reading a large JSONL file of ordinary lines (Classification.read), default 1 GB.

    .venv/bin/python benchmarks/bench_bounded_inputs.py ADAPTER [--big-mb 1024]

ADAPTER: a classification adapter folder (e.g. from `hub train`). Files are generated under
/tmp and deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HUB = Path(sys.executable).with_name("hub")
LINE_MB = 50
READ_AND_ENCODE = """
import sys
from hubcli.base.load import load_tokenizer
from hubcli.base.ref import packaged_base_path
from hubcli.tasks import get_task
task = get_task("classification")
task.notify = lambda m: print(m[:120], file=sys.stderr)
examples = task.read(__import__("pathlib").Path(sys.argv[1]))
if sys.argv[2] == "encode":
    task.encode(examples, load_tokenizer(packaged_base_path()), ["neg", "pos"], 128)
print(len(examples), "examples", file=sys.stderr)
"""


def measure(label: str, cmd: list[str], stdin_path: Path | None = None) -> None:
    """Run `cmd` under /usr/bin/time and print its wall time and peak RSS."""
    start = time.perf_counter()
    with open(stdin_path or "/dev/null", "rb") as stdin:
        done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], stdin=stdin,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    print(f"{label:48s} {seconds:7.1f} s  {peak_kb / 1024:8.0f} MiB peak RSS  ({status})")


def sentence(i: int) -> str:
    return f"example {i}: a gripping, beautifully acted film with a plot that never drags " * 6


def write_big_jsonl(path: Path, megabytes: int) -> int:
    lines, written, target = 0, 0, megabytes << 20
    with open(path, "w") as f:
        while written < target:
            row = json.dumps({"text": sentence(lines), "label": "pos" if lines % 2 else "neg"})
            f.write(row + "\n")
            written += len(row) + 1
            lines += 1
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapter", type=Path)
    ap.add_argument("--big-mb", type=int, default=1024)
    a = ap.parse_args()
    words = "a gripping, beautifully acted film " * ((LINE_MB << 20) // 35)
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        line = Path(tmp) / "line.txt"
        line.write_text(words + "\n")
        measure(f"hub predict, one {LINE_MB} MB line on stdin",
                [str(HUB), "predict", str(a.adapter), "--json"], stdin_path=line)
        line.unlink()
        long_jsonl = Path(tmp) / "long.jsonl"
        long_jsonl.write_text(json.dumps({"text": "fine", "label": "pos"}) + "\n"
                              + json.dumps({"text": words, "label": "neg"}) + "\n")
        measure(f"read + encode a JSONL with a {LINE_MB} MB line",
                [sys.executable, "-c", READ_AND_ENCODE, str(long_jsonl), "encode"])
        long_jsonl.unlink()
        big = Path(tmp) / "big.jsonl"
        rows = write_big_jsonl(big, a.big_mb)
        measure(f"read a {a.big_mb} MB JSONL ({rows:,} rows)",
                [sys.executable, "-c", READ_AND_ENCODE, str(big), "read"])


if __name__ == "__main__":
    main()
