"""How long `hub push` and `hub pull` of a ~3 MB bundle take, client side, process start-up
excluded.

    .venv/bin/python benchmarks/bench_client_push.py [--runs 7]

Starts `hub-registry serve` in a subprocess (temp instance folder, SQLite), creates a user with
`hub-registry create-user`, then times in this process (median of `--runs`): a push of a new
version with Git LFS for the weights (what `hub push` does), the same with everything inline
(what a registry without LFS gets), a push of a version that is published already (no-op), and
a pull (download + verify) into an empty cache. The bundle has the shape of a MiniLM-L6 adapter
(hidden 384, 6 layers, bottleneck 64).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(instance: Path, code: Path | None = None,
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, str]:
    """A registry on a free port of 127.0.0.1 with user `bench`: (process, URL, token).

    `code` runs another checkout's registry (it goes first on PYTHONPATH); `env` adds settings.
    """
    env = {**os.environ, "HUB_REGISTRY_INSTANCE_PATH": str(instance), **(env or {})}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cli = [sys.executable, "-c", "from registry_server.cli import main; main()"]
    out = subprocess.run([*cli, "create-user", "bench"], env=env, check=True, cwd=code,
                         capture_output=True, text=True).stdout
    token = re.search(r"(hubr_\S+)", out)[1]
    port = free_port()
    server = subprocess.Popen([*cli, "serve", "--port", str(port)], env=env, cwd=code,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/api/v1/health", timeout=1)
            return server, url, token
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the registry did not start")


def median_ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1000:7.1f} ms (min {min(times) * 1000:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["HUB_HOME"] = str(tmp / "home")
        from factories import make_signed_bundle

        from hubcli.remote import client as remote_api
        from hubcli.remote.pull import pull
        from hubcli.signing.sign import create_signing_key

        server, url, token = serve(tmp / "instance")
        try:
            create_signing_key(name="bench")
            remote = remote_api.Remote(url, token, progress=False)
            remote_api.upload_own_key(remote)

            def bundle(version: str) -> Path:
                return make_signed_bundle(tmp / "b" / version / "bench-adapter",
                                          name="bench-adapter", version=version, hidden=384,
                                          num_layers=6, bottleneck=64, seed=len(version))

            size = sum(p.stat().st_size for p in bundle("0.0.1").iterdir())
            remote_api.push_bundle(remote, tmp / "b" / "0.0.1" / "bench-adapter")  # warm up
            results = {"push (LFS)": [], "push (inline)": [], "push again (no-op)": [],
                       "pull into an empty cache": []}
            for run in range(args.runs):
                for mode, headers in (("push (LFS)", remote_api.LFS_OPT_IN),
                                      ("push (inline)", {})):
                    folder = bundle(f"1.{run}.{len(headers)}")
                    remote_api.LFS_OPT_IN = headers
                    try:
                        start = time.perf_counter()
                        remote_api.push_bundle(remote, folder)
                        results[mode].append(time.perf_counter() - start)
                    finally:
                        remote_api.LFS_OPT_IN = {"X-Hub-Lfs": "1"}
                start = time.perf_counter()
                remote_api.push_bundle(remote, folder)
                results["push again (no-op)"].append(time.perf_counter() - start)
                shutil.rmtree(tmp / "home" / "hf-cache", ignore_errors=True)
                start = time.perf_counter()
                pull(f"bench/bench-adapter@1.{run}.0", remote)
                results["pull into an empty cache"].append(time.perf_counter() - start)
        finally:
            server.terminate()
            server.wait()
    print(f"bundle: {size:,} bytes; median of {args.runs} runs")
    for name, times in results.items():
        print(f"  {name:<26} {median_ms(times)}")


if __name__ == "__main__":
    main()
