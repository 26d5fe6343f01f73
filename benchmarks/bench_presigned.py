"""Download throughput with many concurrent clients: the registry serving file bytes itself
(disk storage; S3 storage proxied through its workers) against redirecting to presigned S3
URLs (the bytes go from the store to the client). moto's S3 server stands in for S3.

    .venv/bin/python benchmarks/bench_presigned.py [--clients 32] [--duration 5] [--workers 2]

Each client is a process that GETs `resolve/main/adapter.safetensors` (the ~3 MB weights of a
MiniLM-L6-shaped adapter) in a loop for `--duration` seconds, following a redirect to the
store the way huggingface_hub does (another host: no Authorization). Prints MiB/s and
requests/s per mode. moto is a single Python process: real S3 scales out, so the redirect
figure here is a floor; what the redirect buys is that the registry's workers only answer
small 302s.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_registry import free_port, make_bundle_dir, wait_http  # noqa: E402

PATH = "/bench/bench-adapter/resolve/main/adapter.safetensors"
S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
          "AWS_DEFAULT_REGION": "us-east-1"}


def _client(args) -> tuple[int, int, int]:
    """(requests, bytes, redirects) of one client until the deadline."""
    port, deadline = args
    conns: dict[str, http.client.HTTPConnection] = {}

    def get(netloc: str, path: str) -> http.client.HTTPResponse:
        if netloc not in conns:
            host, _, p = netloc.partition(":")
            conns[netloc] = http.client.HTTPConnection(host, int(p))
        conns[netloc].request("GET", path)
        return conns[netloc].getresponse()

    requests = received = redirects = 0
    while time.monotonic() < deadline:
        response = get(f"127.0.0.1:{port}", PATH)
        if response.status == 302:
            response.read()
            location = urlsplit(response.getheader("Location"))
            response = get(location.netloc, f"{location.path}?{location.query}")
            redirects += 1
        if response.status != 200:
            raise RuntimeError(f"GET answered {response.status}")
        while chunk := response.read(1 << 20):
            received += len(chunk)
        requests += 1
    return requests, received, redirects


def load(port: int, clients: int, duration: int) -> dict:
    deadline = time.monotonic() + duration
    with multiprocessing.Pool(clients) as pool:
        runs = pool.map(_client, [(port, deadline)] * clients)
    requests, received, redirects = (sum(r[i] for r in runs) for i in range(3))
    return {"rps": requests / duration, "mib_s": received / duration / (1 << 20),
            "redirected": redirects}


def serve(instance: Path, settings: dict, workers: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, **S3_ENV, "HUB_REGISTRY_INSTANCE_PATH": str(instance),
           **{f"HUB_REGISTRY_{k}": str(v) for k, v in settings.items()}}
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", str(workers), "--preload",
                             "-k", "gthread", "--threads", "8", "-b", f"127.0.0.1:{port}",
                             "registry_server:create_app()"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/api/v1/health", proc)
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def prepare(instance: Path, settings: dict, tmp: Path, workers: int) -> None:
    """A user and one pushed version of `bench/bench-adapter`."""
    import huggingface_hub

    from hubcli.signing.keys import generate_keypair
    from registry_server import create_app
    from registry_server.db import db
    from registry_server.services import accounts

    app = create_app({"INSTANCE_PATH": str(instance), "AUTO_MIGRATE": True, **settings})
    pair = generate_keypair(force=True)  # one per registry; the bundle is signed at once
    with db.session_scope(app) as session:
        user = accounts.create_user(session, "bench")
        accounts.add_public_key(session, user, pair.public_path.read_text())
        token = accounts.create_token(session, user)[1]
    db.engine(app).dispose()
    proc, port = serve(instance, settings, workers)
    try:
        api = huggingface_hub.HfApi(endpoint=f"http://127.0.0.1:{port}", token=token)
        api.create_repo("bench/bench-adapter")
        api.upload_folder(folder_path=make_bundle_dir(tmp / f"b-{uuid.uuid4().hex[:6]}",
                                                      pair.private_path, "1.0.0", 0),
                          repo_id="bench/bench-adapter")
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=int, default=5, help="seconds per mode")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    args = parser.parse_args()
    os.environ.update(S3_ENV)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        os.environ["HUB_HOME"] = str(tmp / "hub_home")
        moto_port = free_port()
        moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                 str(moto_port)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_http(moto_port, "/", moto)
            import boto3

            endpoint = f"http://127.0.0.1:{moto_port}"
            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
            disk = {"DATABASE_URL": f"sqlite:///{tmp / 'disk.db'}"}
            s3 = {"DATABASE_URL": f"sqlite:///{tmp / 's3.db'}", "STORAGE": "s3://bench/blobs",
                  "S3_ENDPOINT_URL": endpoint}
            prepare(tmp / "disk", disk, tmp, args.workers)
            prepare(tmp / "s3", s3, tmp, args.workers)
            modes = [("disk, served by the registry", tmp / "disk", disk),
                     ("S3, proxied by the registry", tmp / "s3", {**s3, "DOWNLOAD_URL_TTL": 0}),
                     ("S3, 302 to a presigned URL", tmp / "s3", s3)]
            print(f"{args.clients} clients, {args.duration} s per mode, gunicorn "
                  f"{args.workers} workers x 8 threads, load average before: "
                  f"{os.getloadavg()[0]:.1f}")
            for label, instance, settings in modes:
                proc, port = serve(instance, settings, args.workers)
                try:
                    r = load(port, args.clients, args.duration)
                finally:
                    stop(proc)
                print(f"{label:32s} {r['mib_s']:7.1f} MiB/s  {r['rps']:7.1f} req/s  "
                      f"(redirected: {r['redirected']})")
        finally:
            moto.send_signal(signal.SIGINT)
            moto.wait(timeout=30)


if __name__ == "__main__":
    main()
