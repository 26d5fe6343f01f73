"""Registry speed under gunicorn on loopback: download throughput against nginx serving the
same file, resolve HEAD latency under concurrency, and push time of a ~3 MB bundle.

    .venv/bin/python benchmarks/bench_registry.py [--workers 4] [--duration 10]
        [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]

Targets: download >= 50% of nginx's throughput; resolve HEAD p99 < 50 ms with 32 concurrent
clients; push of a 3 MB bundle < 1 s. GET load comes from `wrk` and HEAD load from ApacheBench
`ab -i` when they are installed (C clients that leave the CPUs to the servers; wrk mishandles
HEAD), else from Python client processes. nginx (`apt-get install nginx-light`) runs on a free
port with a temp config; without it the comparison is skipped and said so. For scale, the same
HEAD load also runs against a bare Flask route under the same gunicorn settings.
Tools: `apt-get install nginx-light wrk apache2-utils`. The bundle has the shape of a MiniLM-L6 adapter (hidden
384, 6 layers, bottleneck 64): about 3 MB of float32 weights.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

# The floor for resolve HEAD on this machine: a Flask route under the same gunicorn that
# answers at once, with no database and no storage.
BASELINE_APP = """from flask import Flask, Response
app = Flask(__name__)
@app.route("/f", methods=["GET", "HEAD"])
def f():
    return Response(headers={"Content-Length": "3000000"})
"""

NGINX_CONF = """worker_processes {workers};
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ root {root}; }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            if conn.getresponse().status < 500:
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing answers on port {port}")


def make_bundle_dir(path: Path, key_path: Path, version: str, seed: int) -> Path:
    from factories import make_adapter_dir

    from hubcli.bundle import make_bundle
    from hubcli.signing.sign import sign_bundle

    make_adapter_dir(path, hidden=384, num_layers=6, bottleneck=64, name="bench-adapter",
                     version=version, seed=seed)
    make_bundle(path)
    sign_bundle(path, key_path)
    return path


# --- load generation ----------------------------------------------------------------------

# `taskset -c CPUS` prefixes from --pin: servers on some cores, load clients on the others, so
# the clients' CPU time does not show up as server latency.
SERVER_PIN: list[str] = []
CLIENT_PIN: list[str] = []

def wrk(url: str, *, connections: int, duration: int) -> dict:
    """Requests/s and latency percentiles (ms) from wrk (GET only)."""
    out = subprocess.run([*CLIENT_PIN, "wrk", "-t", str(min(connections, 2)), "-c", str(connections), "-d",
                          f"{duration}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {p: _ms(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+([\d.]+\w+)", out, re.M)}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rate, "p50_ms": pct["50"], "p99_ms": pct["99"],
            "errors": int(errors.group(1)) if errors else 0}


def ab_head(url: str, *, connections: int, duration: int) -> dict:
    """HEAD requests/s and latency percentiles (ms) from ApacheBench (`ab -i`)."""
    out = subprocess.run([*CLIENT_PIN, "ab", "-i", "-q", "-c", str(connections), "-t", str(duration), "-n",
                          "10000000", url], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\d+)", out, re.M))
    errors = re.search(r"Non-2xx responses:\s+(\d+)", out)
    return {"rps": rate, "p50_ms": float(pct["50"]), "p99_ms": float(pct["99"]),
            "errors": int(errors.group(1)) if errors else 0}


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def _client(args) -> list[float]:
    port, path, method, deadline = args
    conn = http.client.HTTPConnection("127.0.0.1", port)
    latencies = []
    while time.monotonic() < deadline:
        start = time.perf_counter()
        conn.request(method, path)
        response = conn.getresponse()
        while response.read(1 << 20):
            pass
        latencies.append(time.perf_counter() - start)
    return latencies


def _pin(cpus: set[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)


def python_load(url: str, *, connections: int, duration: int, method: str = "GET") -> dict:
    """The same figures from Python client processes (when wrk is not installed)."""
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/.*)", url)
    deadline = time.monotonic() + duration
    cpus = {int(c) for c in CLIENT_PIN[-1].split(",")} if CLIENT_PIN else None
    with multiprocessing.Pool(connections, initializer=_pin, initargs=(cpus,)) as pool:
        runs = pool.map(_client, [(int(m.group(1)), m.group(2), method, deadline)] * connections)
    latencies = sorted(t for run in runs for t in run)
    return {"rps": len(latencies) / duration,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000, "errors": 0}


# --- the benchmark ------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--duration", type=int, default=10, help="seconds per load run")
    parser.add_argument("--download-clients", type=int, default=4)
    parser.add_argument("--head-clients", type=int, default=32)
    parser.add_argument("--pushes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="download/HEAD rounds")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temp folder")
    parser.add_argument("--pin", default="", metavar="SERVER_CPUS:CLIENT_CPUS",
                        help="e.g. 0:1 runs the servers on CPU 0 and the load clients on CPU 1")
    args = parser.parse_args()
    if args.pin:
        server_cpus, client_cpus = args.pin.split(":")
        SERVER_PIN[:] = ["taskset", "-c", server_cpus]
        CLIENT_PIN[:] = ["taskset", "-c", client_cpus]
    load = wrk if shutil.which("wrk") else python_load
    head_load = ab_head if shutil.which("ab") else partial(python_load, method="HEAD")

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.chmod(tmp, 0o755)  # nginx workers run as another user
        os.environ["HUB_HOME"] = str(tmp / "hub_home")
        instance = tmp / "instance"
        results: dict = {"load_generator": load.__name__, "workers": args.workers,
                         "head_clients": args.head_clients, "pin": args.pin or "none",
                         "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                         "download_registry": [], "download_nginx": [], "resolve_head": [],
                         "baseline_head": []}

        from registry_server import create_app
        from registry_server.db import db
        from registry_server.services import accounts
        from hubcli.signing.keys import generate_keypair

        settings = {"INSTANCE_PATH": str(instance),
                    "DATABASE_URL": args.database_url or f"sqlite:///{instance / 'registry.db'}"}
        app = create_app({**settings, "AUTO_MIGRATE": True})
        pair = generate_keypair()
        with db.session_scope(app) as session:
            user = accounts.create_user(session, "bench")
            accounts.add_public_key(session, user, pair.public_path.read_text())
            token = accounts.create_token(session, user)[1]

        port = free_port()
        env = {**os.environ, **{f"HUB_REGISTRY_{k}": v for k, v in settings.items()}}
        gunicorn = subprocess.Popen(
            [*SERVER_PIN, sys.executable, "-m", "gunicorn", "-w", str(args.workers), "--preload",
             "-b",
             f"127.0.0.1:{port}", "registry_server:create_app()"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nginx = baseline = None
        try:
            wait_http(port, "/api/v1/health", gunicorn)
            results["push"] = bench_push(port, token, pair.private_path, tmp, args.pushes)
            blob_dir, blob_name, size = weights_blob(app)
            results["file_bytes"] = size
            url = f"http://127.0.0.1:{port}/bench/bench-adapter/resolve/main/adapter.safetensors"
            (tmp / "baseline_app.py").write_text(BASELINE_APP)
            baseline_port = free_port()
            baseline = subprocess.Popen(
                [*SERVER_PIN, sys.executable, "-m", "gunicorn", "-w", str(args.workers),
                 "--chdir", str(tmp),
                 "-b", f"127.0.0.1:{baseline_port}", "baseline_app:app"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_http(baseline_port, "/f", baseline)
            nginx, nginx_port = start_nginx(tmp, blob_dir, args.workers)
            nginx_url = f"http://127.0.0.1:{nginx_port}/{blob_name}" if nginx else None
            for _ in range(args.rounds):
                # Alternating registry and nginx rounds share out the noise of a busy machine.
                kw = {"connections": args.download_clients, "duration": args.duration}
                results["download_registry"].append(load(url, **kw))
                if nginx_url:
                    results["download_nginx"].append(load(nginx_url, **kw))
                results["resolve_head"].append(head_load(url, connections=args.head_clients,
                                                         duration=args.duration))
                results["baseline_head"].append(head_load(
                    f"http://127.0.0.1:{baseline_port}/f", connections=args.head_clients,
                    duration=args.duration))
        finally:
            gunicorn.send_signal(signal.SIGINT)
            gunicorn.wait(timeout=30)
            if nginx is not None:
                nginx.send_signal(signal.SIGQUIT)
                nginx.wait(timeout=30)
            if baseline is not None:
                baseline.send_signal(signal.SIGINT)
                baseline.wait(timeout=30)
            db.engine(app).dispose()
    report(results)


def bench_push(port: int, token: str, key_path: Path, tmp: Path, pushes: int) -> dict:
    """Wall time of `HfApi.upload_folder` (preupload + commit) for new versions of a ~3 MB
    bundle, and the server's share (the commit request alone)."""
    import huggingface_hub

    api = huggingface_hub.HfApi(endpoint=f"http://127.0.0.1:{port}", token=token)
    api.create_repo("bench/bench-adapter")
    bundles = [make_bundle_dir(tmp / f"bundle-{i}", key_path, f"1.0.{i}", i)
               for i in range(pushes)]
    size = sum(p.stat().st_size for p in bundles[0].iterdir())
    totals = []
    for bundle in bundles:
        start = time.perf_counter()
        api.upload_folder(folder_path=bundle, repo_id="bench/bench-adapter")
        totals.append(time.perf_counter() - start)
    return {"bundle_bytes": size, "median_s": statistics.median(totals), "max_s": max(totals)}


def weights_blob(app) -> tuple[Path, str, int]:
    """Where the latest adapter.safetensors lies in disk storage."""
    from sqlalchemy import select

    from registry_server.db import db
    from registry_server.models import Blob, VersionFile
    from registry_server.blobhttp import get_storage

    with db.session_scope(app) as session:
        blob = session.scalars(select(Blob).join(VersionFile, VersionFile.blob_sha256 == Blob.sha256)
                               .where(VersionFile.path == "adapter.safetensors")).first()
        path = get_storage(app).path(blob.sha256)
        return path.parent, path.name, blob.size


def start_nginx(tmp: Path, root: Path, workers: int):
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists()
                                       else None)
    if binary is None:
        print("nginx is not installed (apt-get install nginx-light): no comparison",
              file=sys.stderr)
        return None, None
    for parent in [root, *root.parents]:
        if parent == tmp.parent:
            break
        os.chmod(parent, 0o755)
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(workers=workers, tmp=tmp, port=port, root=root))
    proc = subprocess.Popen([*SERVER_PIN, binary, "-c", str(conf), "-p", str(tmp)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/", proc)
    return proc, port


def report(results: dict) -> None:
    size, mib = results["file_bytes"], 1 << 20
    med = statistics.median
    print(f"GET load: {results['load_generator']}; gunicorn workers: {results['workers']}; "
          f"pinned (server:clients): {results['pin']}; "
          f"load average before: {results['loadavg']}")
    push = results["push"]
    print(f"push ({push['bundle_bytes'] / mib:.1f} MiB bundle, upload_folder): median "
          f"{push['median_s'] * 1000:.0f} ms, max {push['max_s'] * 1000:.0f} ms   "
          "(target < 1000 ms)")
    reg = [r["rps"] for r in results["download_registry"]]
    print(f"download {size / mib:.1f} MiB file, registry: median {med(reg):.0f} req/s = "
          f"{med(reg) * size / mib:.0f} MiB/s  (rounds: {', '.join(f'{r:.0f}' for r in reg)})")
    if results["download_nginx"]:
        ngx = [r["rps"] for r in results["download_nginx"]]
        ratios = [r / n for r, n in zip(reg, ngx)]
        results["download_ratio"] = med(ratios)
        print(f"download {size / mib:.1f} MiB file, nginx:    median {med(ngx):.0f} req/s = "
              f"{med(ngx) * size / mib:.0f} MiB/s  (rounds: {', '.join(f'{n:.0f}' for n in ngx)})")
        print(f"registry / nginx: median {med(ratios):.0%} (rounds: "
              f"{', '.join(f'{r:.0%}' for r in ratios)})   (target >= 50%)")
    for key, label in (("resolve_head", "resolve HEAD"),
                       ("baseline_head", "baseline HEAD (bare Flask route, same gunicorn)")):
        heads = results[key]
        p99 = [h["p99_ms"] for h in heads]
        print(f"{label}, {results['head_clients']} clients: median "
              f"{med(h['rps'] for h in heads):.0f} req/s, p99 median {med(p99):.0f} ms "
              f"(rounds: {', '.join(f'{p:.0f}' for p in p99)})")
    print("target: resolve HEAD p99 < 50 ms")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
