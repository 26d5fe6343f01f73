"""`hub serve` as a Ray Serve deployment: a local Ray, 2 replicas, real HTTP; each request's
adapter travels in Ray's multiplexing header. Skipped without the [ray] extra."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from factories import LORA, make_adapter_dir

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
from ray import serve  # noqa: E402

from hubcli.serving.engine import Engine, Job  # noqa: E402
from hubcli.serving.ray import HEADER, AdapterReplica  # noqa: E402

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


def test_two_replicas_answer_as_the_engine_does(adapters, tiny_base_dir):
    engine = Engine(str(tiny_base_dir), allow_unsigned=True, allow_base_mismatch=True)
    slots = {a: engine.attach(Path(a)) for a in adapters}
    expected = {a: engine.run([Job(slots[a], [t], 1) for t in TEXTS]) for a in adapters}

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = AdapterReplica.options(num_replicas=2).bind(
            adapters, str(tiny_base_dir), True, True, 5.0)
        serve.run(app, name="adapters", route_prefix="/")
        url = f"http://127.0.0.1:{port}/v1/predict"
        requests = [(a, i) for a in adapters for i in range(len(TEXTS))]
        with httpx.Client(timeout=120) as client, ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda r: client.post(
                url, json={"inputs": [TEXTS[r[1]]]}, headers={HEADER: r[0]}), requests))
            no_header = client.post(url, json={"inputs": ["x"]})
            unknown = client.post(url, json={"inputs": ["x"]}, headers={HEADER: "./nowhere"})
        assert [a.status_code for a in answers] == [200] * len(requests)
        for (adapter, i), answer in zip(requests, answers):
            got = answer.json()["predictions"][0]
            want = expected[adapter][i][0]
            assert got["label"] == want["label"] and abs(got["score"] - want["score"]) < 1e-5
        assert (no_header.status_code, no_header.json()["error"]) == \
            (422, "the request names no adapter")
        assert (unknown.status_code, unknown.json()["error"]) == \
            (404, "no adapter named './nowhere' is served")
        replicas = serve.status().applications["adapters"].deployments["AdapterReplica"]
        assert replicas.replica_states.get("RUNNING") == 2
    finally:
        serve.shutdown()
        ray.shutdown()
