"""Server memory and time of pushes with everything inline (no LFS): the registry's worst case.

    .venv/bin/python benchmarks/bench_push_memory.py [--code DIR] [--skip-memory]

Starts `hub-registry serve` (the threaded dev server: every push in one process, the harshest
case for memory) on 127.0.0.1 with a temp instance folder (SQLite + disk), then:
1. memory: one push of a 250 MiB inline file, then 3 concurrent pushes of 177 MiB inline files
   (each body is generated piece by piece, sent chunked, so the client holds ~1 MiB). The files
   are not bundles, so each push is refused (422) after the server has read, decoded and
   staged all of it: the whole receive path runs. Prints the server's idle RSS and its peak
   RSS (VmHWM) after each step.
2. time: a commit (POST, everything inline) of a signed ~3 MB and a ~100 MB bundle, median of
   `--runs`, measured by the client.

`--code DIR` runs the server from another checkout (e.g. an export of main) to compare.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

import bench_client_push

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
MiB = 1 << 20
PIECE = 3 * (1 << 18)  # bytes encoded per piece: a multiple of 3, so pieces join cleanly
HEADER = json.dumps({"key": "header", "value": {"summary": "bench"}}).encode() + b"\n"


def serve(instance: Path, code: Path) -> tuple[subprocess.Popen, str, str]:
    """The registry of checkout `code`, with limits above the pushes this script makes."""
    return bench_client_push.serve(instance, code, {
        "HUB_REGISTRY_MAX_FILE_SIZE": str(300 * MiB),
        "HUB_REGISTRY_MAX_BUNDLE_SIZE": str(600 * MiB)})


def memory_mib(pid: int, field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of a process, MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M)[1]) / 1024


def inline_body(size: int):
    """A commit with one inline file of `size` bytes, produced piece by piece."""
    yield HEADER + b'{"key": "file", "value": {"path": "adapter.safetensors", "content": "'
    left = size
    piece = base64.b64encode(b"\x01" * PIECE)
    while left >= PIECE:
        yield piece
        left -= PIECE
    yield base64.b64encode(b"\x01" * left) + b'", "encoding": "base64"}}\n'


def commit(url: str, token: str, body, repo: str = "bench/mem") -> requests.Response:
    return requests.post(f"{url}/api/models/{repo}/commit/main", data=body,
                         headers={"Authorization": f"Bearer {token}",
                                  "Content-Type": "application/x-ndjson"})


def measure_memory(server: subprocess.Popen, url: str, token: str) -> None:
    requests.post(f"{url}/api/repos/create", json={"name": "mem"},
                  headers={"Authorization": f"Bearer {token}"})
    idle = memory_mib(server.pid, "VmRSS")
    print(f"server idle RSS: {idle:.0f} MiB")
    start = time.perf_counter()
    answer = commit(url, token, inline_body(250 * MiB))
    peak = memory_mib(server.pid, "VmHWM")
    print(f"  one 250 MiB inline push: HTTP {answer.status_code} in "
          f"{time.perf_counter() - start:.1f} s; peak RSS {peak:.0f} MiB "
          f"(+{peak - idle:.0f} over idle)")
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(
        commit(url, token, inline_body(177 * MiB)).status_code)) for _ in range(3)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = memory_mib(server.pid, "VmHWM")
    print(f"  3 concurrent 177 MiB inline pushes: HTTP {sorted(statuses)} in "
          f"{time.perf_counter() - start:.1f} s; peak RSS {peak:.0f} MiB "
          f"(+{peak - idle:.0f} over idle)")


def measure_commits(url: str, token: str, tmp: Path, runs: int) -> None:
    from factories import make_signed_bundle

    from hubcli.remote import client as remote_api
    from hubcli.signing.sign import create_signing_key

    create_signing_key(name="bench")
    remote_api.upload_own_key(remote_api.Remote(url, token, progress=False))
    # MiniLM-shaped (~3 MB) and a large adapter (hidden 1024, bottleneck 512, 12 layers).
    shapes = {"3 MB": dict(hidden=384, num_layers=6, bottleneck=64),
              "100 MB": dict(hidden=1024, num_layers=12, bottleneck=512)}
    for label, shape in shapes.items():
        times, size = [], 0
        for run in range(runs):
            name = f"big{label.split()[0]}"
            folder = make_signed_bundle(tmp / "b" / f"{label}-{run}" / name, name=name,
                                        version=f"1.{run}.0", seed=run, **shape)
            body = HEADER + b"".join(
                json.dumps({"key": "file", "value": {
                    "path": p.name, "encoding": "base64",
                    "content": base64.b64encode(p.read_bytes()).decode()}}).encode() + b"\n"
                for p in sorted(folder.iterdir()))
            size = sum(p.stat().st_size for p in folder.iterdir())
            repo = f"bench/{name}"
            requests.post(f"{url}/api/repos/create", json={"name": name},
                          headers={"Authorization": f"Bearer {token}"})
            start = time.perf_counter()
            answer = commit(url, token, body, repo=repo)
            times.append(time.perf_counter() - start)
            assert answer.status_code == 200, answer.text
            del body
        print(f"  commit of a {label} bundle ({size:,} bytes, inline): median "
              f"{statistics.median(times) * 1000:.0f} ms of {runs} (min {min(times) * 1000:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT,
                        help="checkout whose registry_server runs (default: this one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["HUB_HOME"] = str(tmp / "home")
        server, url, token = serve(tmp / "instance", args.code.resolve())
        try:
            print(f"server code: {args.code}")
            if not args.skip_memory:
                measure_memory(server, url, token)
            measure_commits(url, token, tmp, args.runs)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
