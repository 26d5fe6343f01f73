"""`hub serve --ray`: the engine as a Ray Serve deployment on a local Ray, 2 replicas, real
HTTP; each request's adapter travels in Ray's multiplexing header (or in the body). Skipped
without the [ray] extra."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from factories import LORA, make_adapter_dir

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
from ray import serve  # noqa: E402

from hubcli.serving.engine import Engine, Job  # noqa: E402
from hubcli.serving.ray import HEADER  # noqa: E402

TEXTS = ["a gripping film", "dull and long", "Paris in spring", "quietly moving"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("ray-served")
    return [str(make_adapter_dir(out / "sst", name="sst", seed=1)),
            str(make_adapter_dir(out / "lora", name="lora", seed=2, architecture=LORA))]


@contextmanager
def hub_serve_on_ray(adapters: list[str], base: Path, port: int, *options: str):
    """`hub serve --ray --replicas 2` in a subprocess, until its first answer; SIGTERM after."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hubcli.cli.main import main; main()", "serve", "--ray",
         "--replicas", "2", "--port", str(port), *options,
         "--base", str(base), "--allow-unsigned", "--allow-base-mismatch", *adapters],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1/predict"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "hub serve --ray did not answer in 240 s"
            try:
                if httpx.post(url, json={"inputs": ["x"], "adapter": adapters[0]},
                              timeout=60).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


def replicas_running(wanted: int, timeout: float = 180) -> int:
    """RUNNING replicas of the app `hub serve --ray` deployed, once `wanted` or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        app = serve.status().applications.get("hub")
        deployment = app.deployments.get("AdapterReplica") if app else None
        states = deployment.replica_states if deployment else {}
        if states.get("RUNNING", 0) >= wanted or time.monotonic() > deadline:
            return states.get("RUNNING", 0)
        time.sleep(1)


def test_hub_serve_ray_two_replicas_answer_as_the_engine_does(adapters, tiny_base_dir):
    engine = Engine(str(tiny_base_dir), allow_unsigned=True, allow_base_mismatch=True)
    slots = {a: engine.attach(Path(a)) for a in adapters}
    expected = {a: engine.run([Job(slots[a], [t], 1) for t in TEXTS]) for a in adapters}

    with hub_serve_on_ray(adapters, tiny_base_dir, free_port(), "--max-inputs", "2") as url:
        # the first answer comes once one replica runs; wait for the second before the load
        ray.init(address="auto", log_to_driver=False)  # the cluster `hub serve --ray` started
        try:
            running = replicas_running(2)
        finally:
            ray.shutdown()
        requests = [(a, i) for a in adapters for i in range(len(TEXTS))]
        with httpx.Client(timeout=120) as client, ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda r: client.post(
                url, json={"inputs": [TEXTS[r[1]]]}, headers={HEADER: r[0]}), requests))
            in_body = client.post(url, json={"adapter": adapters[1], "inputs": [TEXTS[0]]})
            no_name = client.post(url, json={"inputs": ["x"]})
            unknown = client.post(url, json={"inputs": ["x"]}, headers={HEADER: "./nowhere"})
            # the request limits as without Ray (they were the defaults whatever was given)
            too_many = client.post(url, json={"inputs": ["a", "b", "c"]},
                                   headers={HEADER: adapters[0]})
            root = url.removesuffix("/v1/predict")
            elsewhere = client.post(f"{root}/anything", json={"inputs": ["x"]},
                                    headers={HEADER: adapters[0]})  # was a prediction
            probes = [client.get(f"{root}/{probe}").status_code for probe in ("health", "ready")]
    assert [a.status_code for a in answers] == [200] * len(requests)
    for (adapter, i), answer in zip(requests, answers):
        got = answer.json()["predictions"][0]
        want = expected[adapter][i][0]
        assert got["label"] == want["label"] and abs(got["score"] - want["score"]) < 1e-5
    assert in_body.json()["predictions"][0]["label"] == expected[adapters[1]][0][0]["label"]
    assert (no_name.status_code, no_name.json()["error"]) == (422, "the request names no adapter")
    assert (unknown.status_code, unknown.json()["error"]) == \
        (404, "no adapter named './nowhere' is served")
    assert (too_many.status_code, too_many.json()["error"]) == \
        (413, "3 inputs exceed the limit of 2 per request")
    assert (elsewhere.status_code, elsewhere.json()["error"]) == \
        (404, "POST /anything: not found")
    assert probes == [200, 200]
    assert running == 2


def test_a_replica_answers_below_its_route_prefix():
    """Ray's proxy keeps the route prefix in the path (`serve run --route-prefix /hub`, or
    several applications in one `serve run`): every request there was a 404."""
    import asyncio

    from starlette.requests import Request

    from hubcli.serving.ray import AdapterReplica

    replica = object.__new__(AdapterReplica.func_or_class)  # the probes need no pool

    def get(path: str, prefix: str):
        return asyncio.run(replica(Request({
            "type": "http", "method": "GET", "path": path, "root_path": prefix,
            "headers": [], "query_string": b""})))

    assert [get(path, "/hub").status_code for path in ("/hub/health", "/hub/ready/")] == \
        [200, 200]
    assert get("/health", "").status_code == 200
    missing = get("/hubby/health", "/hub")  # not below the prefix
    assert (missing.status_code, json.loads(missing.body)["error"]) == \
        (404, "GET /hubby/health: not found")


def test_a_missing_adapter_folder_is_refused_before_ray_starts(tmp_path):
    """It was a 50-line traceback ending 'Deploying application hub failed', after Ray had
    started, the cause in a replica's log."""
    from click.testing import CliRunner

    from hubcli.cli.main import cli

    for folder in (tmp_path / "nosuch", tmp_path):  # not there; there, but not an adapter
        result = CliRunner().invoke(cli, ["serve", "--ray", str(folder)])
        assert result.exit_code == 1
        assert result.stderr.splitlines()[0].startswith(f"error: {folder}")
        assert not ray.is_initialized()


def test_on_a_shared_cluster_only_its_own_application_goes(adapters, tiny_base_dir, tmp_path):
    """Stopped on RAY_ADDRESS's cluster, hub serve --ray ran serve.shutdown(): every other
    application there went with it; so it did on a `ray start` cluster that Ray joined
    without RAY_ADDRESS."""
    import os

    ray_cli = str(Path(sys.executable).with_name("ray"))
    head, http = free_port(), free_port()
    env = {**os.environ, "RAY_ADDRESS": "auto"}  # the cluster started here (its node's IP)
    subprocess.run([ray_cli, "start", "--head", "--port", str(head), "--num-cpus", "2",
                    "--include-dashboard", "false", "--disable-usage-stats"],
                   check=True, capture_output=True, timeout=180,
                   env={k: v for k, v in env.items() if k != "RAY_ADDRESS"})
    other = tmp_path / "other.py"  # another team's application, on the proxy at `http`
    other.write_text(
        "from ray import serve\n"
        "@serve.deployment\n"
        "class Other:\n"
        "    async def __call__(self, request):\n"
        "        return 'still here'\n"
        f"serve.start(http_options={{'host': '127.0.0.1', 'port': {http}}})\n"
        "serve.run(Other.bind(), name='other', route_prefix='/other')\n")
    try:
        subprocess.run([sys.executable, str(other)], check=True, capture_output=True,
                       timeout=240, env=env)
        assert httpx.get(f"http://127.0.0.1:{http}/other", timeout=30).text == "still here"
        # on RAY_ADDRESS's cluster, the proxy that was there answers for it (Serve keeps its
        # own port); without RAY_ADDRESS, on a Ray of its own at --port, though Ray itself
        # would join the `ray start` cluster (and hub's stop then shut its Serve down)
        own = free_port()
        for environment, port, said in (
                (env, http, "on the cluster's Serve HTTP proxy"),
                ({k: v for k, v in env.items() if k != "RAY_ADDRESS"}, own,
                 f"on http://127.0.0.1:{own}/v1/predict")):
            proc = subprocess.Popen(
                [sys.executable, "-c", "from hubcli.cli.main import main; main()", "serve",
                 "--ray", "--port", str(own), "--base", str(tiny_base_dir), "--allow-unsigned",
                 "--allow-base-mismatch", adapters[0]],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
            deadline = time.monotonic() + 240
            while True:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "hub serve --ray did not answer in 240 s"
                try:
                    answer = httpx.post(f"http://127.0.0.1:{port}/v1/predict", timeout=60,
                                        json={"inputs": ["x"]}, headers={HEADER: adapters[0]})
                    if answer.status_code == 200:
                        break
                except httpx.TransportError:  # its own proxy, not up yet
                    pass
                time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=120)
            assert said in out
            assert httpx.get(f"http://127.0.0.1:{http}/other", timeout=30).text == "still here"
    finally:
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True, timeout=120)
