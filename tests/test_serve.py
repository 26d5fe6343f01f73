"""`hub serve`: a real uvicorn server on a free localhost port, driven over real HTTP.

Three tiny adapters (a Houlsby classifier, a LoRA classifier, a Houlsby tagger) on the tiny
random BERT, plus `__base__`."""

from __future__ import annotations

import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from factories import LORA, close, make_adapter_dir, requirement

from hubcli.api import AdapterHub
from hubcli.serving.service import ServeSettings
from hubcli.serving.batcher import Batcher, BatchSettings
from hubcli.serving.engine import Engine, Job, PassLock
from hubcli.serving.pool import Pool
from hubcli.serving.server import make_server

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["a gripping film", "Angela Merkel visited Paris .", "dull and long", "Paris in spring",
         "an utter mess", "quietly moving", "a film", "Berlin"]
POLICY = {"allow_unsigned": True, "allow_base_mismatch": True}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("served")
    made = {
        "sst": make_adapter_dir(out / "sst", name="sst", seed=1),
        "lora": make_adapter_dir(out / "lora", name="lora", seed=2, architecture=LORA),
        "ner": make_adapter_dir(out / "ner", name="ner", seed=3, task="tagging",
                                head={"type": "token_classification", "num_outputs": len(TAGS),
                                      "labels": TAGS}),
    }
    return {name: str(path) for name, path in made.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(pool: Pool, settings: ServeSettings, access_log: str = "off"):
    """A real uvicorn server for `pool` in a thread; yields its URL; stops it gracefully."""
    port = free_port()
    server = make_server(pool, settings, host="127.0.0.1", port=port, access_log=access_log)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def engine(tiny_base_dir) -> Engine:
    return Engine(str(tiny_base_dir), **POLICY)


@pytest.fixture(scope="module")
def pool(engine, adapters) -> Pool:
    pool = Pool(engine)
    for path in adapters.values():
        pool.add(path)
    return pool


@pytest.fixture(scope="module")
def url(pool):
    # two workers, as `hub serve` runs by default: the mixed requests below overlap passes
    with running(pool, ServeSettings(BatchSettings(max_wait_ms=50, workers=2))) as (url, _server):
        yield url


def test_mixed_concurrent_requests_equal_each_adapter_alone(url, adapters, tiny_base_dir):
    hub = AdapterHub(str(tiny_base_dir))
    for name, path in adapters.items():
        hub.load(path, name=name, **POLICY)
    expected = {path: [{"text": t, **p} for t, p in zip(TEXTS, hub.predict(TEXTS, adapter=name))]
                for name, path in adapters.items()}
    requests = [(path, TEXTS[i:i + 3]) for path in adapters.values() for i in range(0, 8, 3)]
    requests += [("__base__", TEXTS[i:i + 3]) for i in range(0, 8, 3)]
    with httpx.Client(timeout=30) as client, ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda r: client.post(f"{url}/v1/predict",
                                                      json={"adapter": r[0], "inputs": r[1]}),
                                requests))
        base_alone = client.post(f"{url}/v1/predict",
                                 json={"adapter": "__base__", "inputs": TEXTS}).json()
    assert [a.status_code for a in answers] == [200] * len(requests)
    for (name, texts), answer in zip(requests, answers):
        got = answer.json()["predictions"]
        want = (base_alone["predictions"] if name == "__base__" else expected[name])
        start = TEXTS.index(texts[0])
        assert close(got, want[start:start + len(texts)]), name
    assert len(base_alone["predictions"][0]["embedding"]) == 32
    assert "entities" in expected[adapters["ner"]][1] and "label" in expected[adapters["sst"]][0]


def test_a_batch_really_mixes_adapters(url, adapters):
    body = httpx.get(f"{url}/metrics").text
    # the concurrent test above (or this module's requests) ran passes of more than one request
    assert "hub_serve_batch_requests_bucket" in body
    assert "hub_serve_request_seconds_bucket" in body
    assert "hub_serve_queue_depth" in body
    assert "hub_serve_adapter_loads_total" in body and "hub_serve_adapter_evictions_total" in body
    with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.post(f"{url}/v1/predict", json={
            "adapter": list(adapters.values())[i % 3], "inputs": ["a film"]}), range(8)))
    samples = _samples(httpx.get(f"{url}/metrics").text, "hub_serve_batch_requests")
    assert samples["count"] < samples["sum"], "every pass ran a single request"


def _samples(text: str, name: str) -> dict[str, float]:
    return {line.split()[0].removeprefix(f"{name}_"): float(line.split()[1])
            for line in text.splitlines() if line.startswith(f"{name}_") and "{" not in line}


def test_adapters_health_and_ready(url, adapters):
    listed = httpx.get(f"{url}/v1/adapters").json()["adapters"]
    assert {a["name"] for a in listed} == {"__base__", *adapters.values()}
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{url}/ready").status_code == 200


@pytest.mark.parametrize("body, status, first", [
    (b"{not json", 422, "the body is not valid JSON"),
    (b'{"adapter": "sst"}', 422, "inputs: Field required"),
    (b'{"adapter": "sst", "inputs": []}', 422,
     "inputs: List should have at least 1 item after validation, not 0"),
    (b'{"adapter": "__base__", "inputs": ["fine", "  "]}', 422, "text 2 is blank"),
    (b'{"adapter": "__base__", "inputs": ["a \\ud800 b"]}', 422,  # was a 500
     "text 1 holds '\\ud800' at character 3: half of a UTF-16 pair, not a character"),
    (b'{"adapter": "nope", "inputs": ["x"]}', 404, "no adapter named 'nope' is served"),
    (b'{"adapter": "__base__", "inputs": ' + b'["x"' + b', "x"' * 64 + b"]}", 413,
     "65 inputs exceed the limit of 64 per request"),
    (b'{"adapter": "__base__", "inputs": ["' + b"x" * 10_001 + b'"]}', 413,
     "an input of 10001 characters exceeds the limit of 10000"),
])
def test_refusals_are_one_line(url, body, status, first):
    answer = httpx.post(f"{url}/v1/predict", content=body,
                        headers={"content-type": "application/json"})
    assert answer.status_code == status
    assert answer.json()["error"] == first
    assert "\n" not in answer.json()["error"]


def test_unknown_paths_blank_names_and_the_base_get_the_one_refusal_shape(pool):
    """An unknown path or method answered the framework's {"detail": ...}; POST
    /v1/adapters of "" loaded the server's working folder, of __base__ said to use the
    Python API."""
    admin = {"authorization": "Bearer adm"}
    with running(pool, ServeSettings(admin_token="adm")) as (url, _server), \
            httpx.Client(timeout=30) as client:
        answers = [client.get(f"{url}/v1/nope"), client.put(f"{url}/v1/predict"),
                   client.post(f"{url}/v1/adapters", json={"adapter": " "}, headers=admin),
                   client.post(f"{url}/v1/adapters", json={"adapter": "__base__"}, headers=admin)]
    assert [(a.status_code, a.json()["error"]) for a in answers] == [
        (404, "GET /v1/nope: not found"), (405, "PUT /v1/predict: method not allowed"),
        (422, "the adapter to load is blank"),
        (409, "__base__ is the untouched base: it is always served")]
    assert answers[1].headers["allow"] == "POST"


def test_a_refusal_quoting_a_lone_surrogate_is_still_json():
    """Starlette could not encode such a body: the client got a plain-text 500."""
    import json

    from hubcli.errors import HubError
    from hubcli.serving.service import refusal

    body = json.loads(refusal(404, HubError("x\ud800: no such adapter folder",
                                            hint="see x\ud800")).body)
    assert body == {"error": "x\\ud800: no such adapter folder", "hint": "see x\\ud800"}


def held(server) -> tuple[threading.Event, threading.Event]:
    """(entered, gate): the server's passes wait for `gate`; `entered` is set once one does."""
    entered, gate = threading.Event(), threading.Event()
    batcher = server.config.app.state.service.batcher
    run = batcher.run

    def slow(jobs):
        entered.set()
        gate.wait(30)
        return run(jobs)

    batcher.run = slow
    return entered, gate


def wait_for_depth(server, depth: int) -> None:
    deadline = time.monotonic() + 30
    while server.config.app.state.service.batcher.depth() < depth:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_full_queue_answers_503_with_retry_after(pool):
    settings = ServeSettings(BatchSettings(queue_size=1, batching=False))
    body = {"adapter": "__base__", "inputs": ["x"]}
    with running(pool, settings) as (url, server), httpx.Client(timeout=30) as client, \
            ThreadPoolExecutor(2) as pool:
        entered, gate = held(server)
        first = [pool.submit(client.post, f"{url}/v1/predict", json=body)]
        entered.wait(30)  # one running
        first.append(pool.submit(client.post, f"{url}/v1/predict", json=body))
        wait_for_depth(server, 1)  # one queued
        refused = client.post(f"{url}/v1/predict", json=body)
        gate.set()
        assert [f.result().status_code for f in first] == [200, 200]
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == "the request queue is full (1 waiting)"


def test_shutdown_finishes_requests_in_flight(pool):
    with running(pool, ServeSettings(BatchSettings(batching=False))) as (url, server), \
            ThreadPoolExecutor(5) as pool:
        entered, gate = held(server)
        inflight = [pool.submit(httpx.post, f"{url}/v1/predict", timeout=30,
                                json={"adapter": "__base__", "inputs": [f"text {i}"]})
                    for i in range(5)]
        entered.wait(30)
        wait_for_depth(server, 4)
        server.should_exit = True
        time.sleep(0.3)  # uvicorn has noticed and stopped accepting
        gate.set()
        answers = [f.result() for f in inflight]
    assert [a.status_code for a in answers] == [200] * 5
    assert [a.json()["predictions"][0]["text"] for a in answers] == [f"text {i}" for i in range(5)]


def metric(url: str, name: str) -> float:
    """The sum of a metric's samples (over all labels) in /metrics."""
    return sum(float(line.split()[-1]) for line in httpx.get(f"{url}/metrics").text.splitlines()
               if line.startswith((f"{name} ", f"{name}{{")))


def test_least_recently_used_adapter_is_evicted_and_reloaded(adapters, tiny_base_dir):
    pool = Pool(Engine(str(tiny_base_dir), **POLICY), max_adapters=2)
    for path in adapters.values():
        pool.add(path)
    sst, lora, ner = adapters.values()
    assert list(pool.listing()) == ["__base__", lora, ner]  # sst was used least recently
    with running(pool, ServeSettings()) as (url, _server):
        answer = httpx.post(f"{url}/v1/predict", json={"adapter": sst, "inputs": ["a film"]})
        assert answer.status_code == 200 and "label" in answer.json()["predictions"][0]
        assert list(pool.listing()) == ["__base__", ner, sst]
        # counted from the app's start: the two attached then, one reload; lora evicted
        assert metric(url, "hub_serve_adapter_loads_total") == 3
        assert metric(url, "hub_serve_adapter_evictions_total") == 1


def test_an_adapter_being_loaded_is_not_unloaded_under_its_load(adapters, tiny_base_dir,
                                                                monkeypatch):
    """A DELETE while a request's reload was under way answered 200, and the load then put
    the adapter back."""
    from hubcli.serving.pool import InUse

    pool = Pool(Engine(str(tiny_base_dir), **POLICY), max_adapters=1)
    sst, lora, _ = adapters.values()
    for path in (sst, lora):
        pool.add(path)
    gate, attach = threading.Event(), pool.engine.attach
    monkeypatch.setattr(pool.engine, "attach", lambda folder: gate.wait(30) and attach(folder))
    loading = pool.fetch(sst)
    with pytest.raises(InUse, match=f"'{sst}' is being loaded for a request"):
        pool.remove(sst)
    gate.set()
    assert loading.result(timeout=60) and list(pool.listing()) == ["__base__", sst]
    pool.remove(sst)
    assert pool.names() == [lora]


def test_an_evicted_adapter_is_listed_and_can_be_unloaded(adapters, tiny_base_dir):
    """Evicted by the limits, an adapter was still answered (reloaded on its next request)
    but missing from GET /v1/adapters and the hints, and DELETE said it was not served."""
    from hubcli.serving.pool import NotServed

    pool = Pool(Engine(str(tiny_base_dir), **POLICY), max_adapters=1)
    sst, lora, ner = adapters.values()
    for path in (sst, lora):
        pool.add(path)
    settings = ServeSettings(admin_token="adm")
    with running(pool, settings) as (url, _server), httpx.Client(timeout=30) as client:
        listed = client.get(f"{url}/v1/adapters").json()
        assert [a["name"] for a in listed["adapters"]] == ["__base__", lora]
        assert listed["on_demand"] == [sst]
        gone = client.delete(f"{url}/v1/adapters/{sst}", headers={"authorization": "Bearer adm"})
        assert (gone.status_code, gone.json()) == (200, {"removed": sst})
        assert client.get(f"{url}/v1/adapters").json()["on_demand"] == []
        refused = client.post(f"{url}/v1/predict", json={"adapter": sst, "inputs": ["a film"]})
        assert refused.status_code == 404 and refused.json()["hint"].startswith(
            f"served: __base__, {lora};")
    assert len(pool) == 1 and pool.names() == [lora]
    with pytest.raises(NotServed, match=f"no adapter named '{ner}' is served"):
        pool.remove(ner)


@pytest.fixture
def published(remote, registry_user, live_registry, monkeypatch, tmp_path):
    """sst2-adapter 1.0.0 signed and pushed by the test's user, whose registry is the default;
    a function to publish more versions."""
    from factories import make_signed_bundle

    from hubcli.remote import client as remote_api
    from hubcli.signing.sign import create_signing_key

    create_signing_key(name=registry_user[0])
    remote_api.upload_own_key(remote)
    monkeypatch.setenv("HUB_ENDPOINT", live_registry.url)
    monkeypatch.setenv("HUB_TOKEN", registry_user[1])

    def publish(name: str, version: str, seed: int):
        bundle = make_signed_bundle(tmp_path / version / name, name=name, version=version,
                                    seed=seed)
        remote_api.push_bundle(remote, bundle)
        return bundle

    publish("sst2-adapter", "1.0.0", 1)
    return publish


def test_fifty_first_requests_for_a_registry_adapter_cause_one_verified_load(
        published, registry_user, live_registry, tiny_base_dir):
    import json

    ref = f"{registry_user[0]}/sst2-adapter"
    bundle = published("bad-adapter", "1.0.0", 99)  # then tamper with its weights there
    manifest = json.loads((bundle / "manifest.json").read_text())
    sha = next(f["sha256"] for f in manifest["files"] if f["path"] == "adapter.safetensors")
    blob = live_registry.folder / "blobs" / sha[:2] / sha[2:4] / sha
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))

    pool = Pool(Engine(str(tiny_base_dir), allow_base_mismatch=True), allow_pull=True)
    with running(pool, ServeSettings()) as (url, _server), httpx.Client(timeout=60) as client, \
            ThreadPoolExecutor(50) as threads:
        body = {"adapter": f"{ref}@1.0.0", "inputs": ["a film"]}
        answers = list(threads.map(lambda _i: client.post(f"{url}/v1/predict", json=body),
                                   range(50)))
        assert [a.status_code for a in answers] == [200] * 50
        assert metric(url, "hub_serve_adapter_loads_total") == 1
        tampered = client.post(f"{url}/v1/predict", json={
            "adapter": f"{registry_user[0]}/bad-adapter", "inputs": ["a film"]})
        assert tampered.status_code == 422
        assert "adapter.safetensors" in tampered.json()["error"], tampered.json()
        again = client.post(f"{url}/v1/predict", json={"adapter": ref, "inputs": ["a film"]})
        assert again.status_code == 200  # served as NS/NAME, whatever version was asked for
        unknown = client.post(f"{url}/v1/predict", json={"adapter": f"{ref}-nope",
                                                         "inputs": ["a film"]})
        assert unknown.status_code == 404
    assert [a["name"] for a in pool.listing().values()] == ["__base__", ref]


def test_admin_endpoints_load_and_unload_with_the_token(adapters, tiny_base_dir, url):
    assert httpx.post(f"{url}/v1/adapters", json={"adapter": adapters["sst"]}).json()["error"] \
        == "the admin endpoints are off"
    pool = Pool(Engine(str(tiny_base_dir), **POLICY))
    with running(pool, ServeSettings(admin_token="s3cret")) as (admin_url, _server), \
            httpx.Client(timeout=30, headers={"authorization": "Bearer s3cret"}) as client:
        sst = adapters["sst"]
        assert httpx.post(f"{admin_url}/v1/adapters", json={"adapter": sst},
                          headers={"authorization": "Bearer nope"}).status_code == 401
        loaded = client.post(f"{admin_url}/v1/adapters", json={"adapter": sst})
        assert (loaded.status_code, loaded.json()["name"]) == (201, sst)
        assert client.post(f"{admin_url}/v1/adapters", json={"adapter": sst}).status_code == 409
        assert client.post(f"{admin_url}/v1/predict",
                           json={"adapter": sst, "inputs": ["a film"]}).status_code == 200
        assert client.delete(f"{admin_url}/v1/adapters/{sst}").status_code == 200
        assert client.delete(f"{admin_url}/v1/adapters/{sst}").status_code == 404
        assert client.post(f"{admin_url}/v1/predict",
                           json={"adapter": sst, "inputs": ["a film"]}).status_code == 404
    assert list(pool.listing()) == ["__base__"]


def test_memory_budget_evicts_the_least_recently_used(adapters, tiny_base_dir):
    from safetensors.torch import load_file

    def size(folder: str) -> int:
        return sum(t.numel() * t.element_size()
                   for t in load_file(f"{folder}/adapter.safetensors").values())

    sst, lora, ner = adapters.values()
    budget = size(lora) + size(ner)  # room for two of the three, not for sst beside them
    assert size(sst) > 0 and budget < size(sst) + size(lora) + size(ner)
    pool = Pool(Engine(str(tiny_base_dir), **POLICY), max_bytes=budget)
    for path in (sst, lora, ner):
        pool.add(path)
    listed = pool.listing()
    assert list(listed) == ["__base__", lora, ner]
    assert [listed[a]["bytes"] for a in (lora, ner)] == [size(lora), size(ner)]
    assert pool.nbytes() == budget


def test_an_adapter_over_the_budget_on_its_own_evicts_none_that_fit(adapters, tiny_base_dir,
                                                                   tmp_path):
    """It cannot fit beside them or without them: it emptied the pool, at start-up and after
    each request for it (served last, it was the most recently used, so every other adapter
    went first)."""
    big = str(make_adapter_dir(tmp_path / "big", name="big", bottleneck=64, seed=4))
    pool = Pool(Engine(str(tiny_base_dir), **POLICY))
    for path in adapters.values():
        pool.add(path)
    pool.max_bytes = pool.nbytes() + 1
    pool.add(big)
    assert len(pool) == 4  # loaded for a request: kept for it, and the others stay
    pool.release(pool.acquire(big))  # its request answered, it goes, alone
    assert list(pool.listing()) == ["__base__", *adapters.values()]
    assert pool.nbytes() == pool.max_bytes - 1
    # while it is pinned, the others still keep to the budget among themselves
    pool.max_bytes -= 2
    pool.fetch(big).result(timeout=60)
    slot = pool.acquire(big)
    sst, lora, ner = adapters.values()
    pool.release(pool.acquire(ner))  # ner the most recently used: sst goes first
    pool.remove(lora)
    pool.add(lora)
    assert list(pool.listing()) == ["__base__", big, ner, lora] and pool.evicted() == [sst]
    pool.release(slot)
    assert list(pool.listing()) == ["__base__", ner, lora]


def test_a_request_counts_the_tokens_its_pass_runs(tiny_base_dir, adapters):
    """What `max_tokens` and a batch's fair share bound: a pair counted its first text only,
    and a tagger's long text one window of its many."""
    engine = Engine(str(tiny_base_dir), **POLICY)
    ner = engine.attach(adapters["ner"])
    tokenizer = engine.hub.base.tokenizer
    pair = ["short", "word " * 60]
    assert engine.count_tokens("__base__", ["\t".join(pair)]) == len(
        tokenizer(*pair)["input_ids"]) == 64
    long = "Angela Merkel visited Paris . " * 60
    whole = len(tokenizer(long)["input_ids"])
    assert engine.hub.manifests[ner]["training"]["max_length"] < whole
    assert engine.count_tokens(ner, [long]) >= whole  # every window, overlaps counted twice


def test_tokens_guard_predicting_and_listing_not_probes(pool):
    body = {"adapter": "__base__", "inputs": ["a film"]}
    settings = ServeSettings(tokens=("t-one", "t-two"), admin_token="adm")
    with running(pool, settings) as (url, _server), httpx.Client(timeout=30) as client:
        refused = client.post(f"{url}/v1/predict", json=body)
        wrong = client.post(f"{url}/v1/predict", json=body,
                            headers={"authorization": "Bearer t-on"})
        answers = [client.post(f"{url}/v1/predict", json=body,
                               headers={"authorization": f"Bearer {t}"}).status_code
                   for t in ("t-one", "t-two", "adm")]
        listing = client.get(f"{url}/v1/adapters")
        probes = [client.get(f"{url}{p}").status_code for p in ("/health", "/ready", "/metrics")]
    assert (refused.status_code, refused.json()["error"]) == \
        (401, "a valid predict token is needed")
    assert wrong.status_code == 401 and answers == [200, 200, 200]
    assert listing.status_code == 401 and probes == [200, 200, 200]


@pytest.mark.parametrize("options", [["--admin-token", ""], ["--token", "t-one", "--token", " "]])
def test_a_blank_token_is_refused_at_start_up(options, monkeypatch):
    """--admin-token "" turned the admin endpoints on for requests with no token at all (an
    empty header compares equal); --token "" was dropped, leaving predicting open."""
    from click.testing import CliRunner

    from hubcli.cli.main import cli
    from hubcli.errors import OptionError

    def started(*_args, **_kwargs):  # a blank token let through: fail, do not serve forever
        raise AssertionError("hub serve started with a blank token")

    monkeypatch.setattr("hubcli.serving.server.serve", started)
    r = CliRunner().invoke(cli, ["serve", *options])
    assert r.exit_code != 0 and "a blank token lets in a request that sends none" in r.output
    with pytest.raises(OptionError, match="--admin-token"):
        ServeSettings(admin_token="")


def test_the_bearer_scheme_is_read_in_any_case_and_required(pool):
    """`bearer t` was refused (a scheme is case-insensitive), and a header of the bare token,
    with no scheme, was let in."""
    body = {"adapter": "__base__", "inputs": ["a film"]}
    with running(pool, ServeSettings(tokens=("t-one",))) as (url, _server), \
            httpx.Client(timeout=30) as client:
        codes = [client.post(f"{url}/v1/predict", json=body,
                             headers={"authorization": h}).status_code
                 for h in ("bearer t-one", "BEARER  t-one", "t-one", "Basic t-one")]
    assert codes == [200, 200, 401, 401]


def test_access_log_is_one_json_object_per_request(pool, adapters):
    import json
    import logging

    from hubcli.serving.accesslog import LOGGER, json_lines_logger

    lines: list[str] = []
    collect = logging.Handler()
    collect.emit = lambda record: lines.append(record.getMessage())
    logger = json_lines_logger()
    logger.addHandler(collect)
    try:
        with running(pool, ServeSettings(), access_log="json") as (url, _server), \
                httpx.Client(timeout=30) as client:
            client.post(f"{url}/v1/predict", json={"adapter": adapters["sst"],
                                                   "inputs": ["a film", "a play"]})
            client.post(f"{url}/v1/predict", json={"adapter": "nope", "inputs": ["x"]})
            client.get(f"{url}/health")
    finally:
        logger.removeHandler(collect)
    records = [json.loads(line) for line in lines]
    assert [(r["method"], r["path"], r["status"]) for r in records] == [
        ("POST", "/v1/predict", 200), ("POST", "/v1/predict", 404), ("GET", "/health", 200)]
    assert [(r.get("adapter"), r.get("inputs")) for r in records] == [
        (adapters["sst"], 2), ("nope", 1), (None, None)]
    assert all(r["ms"] > 0 and r["client"] == "127.0.0.1" and r["time"].endswith("+00:00")
               for r in records)
    assert logging.getLogger(LOGGER) is logger


def test_options_ray_does_not_carry_are_refused(adapters):
    from click.testing import CliRunner

    from hubcli.cli.main import cli

    result = CliRunner().invoke(cli, ["serve", "--ray", "--token", "t", "--max-adapters", "2",
                                      "--device", "cuda", adapters["sst"]])
    assert result.exit_code != 0
    assert "--max-adapters, --token, --device cannot be used with --ray" in result.output
    # a device this machine lacks: one line, before any adapter is read or the base loads
    gpu = CliRunner().invoke(cli, ["serve", "--device", "cuda:0", adapters["sst"]])
    assert gpu.exit_code == 1
    assert "error: --device cuda:0: no CUDA GPU is available here" in gpu.stderr
    alone = CliRunner().invoke(cli, ["serve", "--replicas", "2", adapters["sst"]])
    assert alone.exit_code != 0 and "--replicas needs --ray" in alone.output


def test_the_registry_try_it_box_asks_a_real_hub_serve(
        published, registry_user, live_registry, tiny_base_dir, monkeypatch):
    """The web UI's "Try it" box (registry_server/ui/tryit.py) against this server: the
    registry forwards the text over HTTP, hub serve pulls and verifies the adapter, and the
    page shows the label and score hub serve answers."""
    import re

    ref = f"{registry_user[0]}/sst2-adapter"
    pool = Pool(Engine(str(tiny_base_dir), allow_base_mismatch=True), allow_pull=True)
    with running(pool, ServeSettings()) as (url, _server):
        monkeypatch.setitem(live_registry.app.config, "INFERENCE_URL", url)
        client = live_registry.app.test_client()
        page = client.get(f"/{ref}").get_data(as_text=True)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)[1]
        tried = client.post(f"/{ref}/try", data={"csrf_token": token, "version": "1.0.0",
                                                  "text": "a gripping film"})
        direct = httpx.post(f"{url}/v1/predict", timeout=60, json={
            "adapter": f"{ref}@1.0.0", "inputs": ["a gripping film"]}).json()["predictions"][0]
    html = tried.get_data(as_text=True)
    assert tried.status_code == 200
    assert f'<span class="label-name">{direct["label"]}</span>' in html
    assert f"{direct['score'] * 100:.1f}%" in html


def test_two_workers_run_two_passes_at_once_and_a_job_that_does_not_fit_waits_for_the_next():
    both_running = threading.Barrier(2, timeout=30)  # broken unless two passes overlap

    def run(jobs: list[Job]) -> list:
        both_running.wait()
        return [job.texts for job in jobs]

    # one token per pass: the second job does not fit the first's batch and must go to the
    # other worker, not wait behind the pass that could not take it
    batcher = Batcher(run, BatchSettings(max_wait_ms=20, max_tokens=1, workers=2))
    batcher.start()
    try:
        futures = [batcher.submit(Job("a", [f"text {i}"], 1)) for i in range(2)]
        assert [f.result(timeout=60) for f in futures] == [["text 0"], ["text 1"]]
    finally:
        batcher.stop()


def test_a_backlog_runs_at_once_the_window_counting_from_its_oldest_arrival():
    batcher = Batcher(lambda jobs: [job.texts for job in jobs],
                      BatchSettings(max_wait_ms=300, workers=1))
    futures = [batcher.submit(Job("a", [str(i)], 1)) for i in range(3)]
    time.sleep(0.35)  # they have waited out the window before any worker gathers
    started = time.monotonic()
    batcher.start()
    try:
        assert [f.result(timeout=30) for f in futures] == [["0"], ["1"], ["2"]]
        assert time.monotonic() - started < 0.2  # not another 300 ms for company
    finally:
        batcher.stop()


def test_a_worker_waits_for_company_only_while_the_others_run_passes():
    batcher = Batcher(lambda jobs: [job.texts for job in jobs],
                      BatchSettings(max_wait_ms=20_000, workers=2))
    batcher.start()
    try:  # the other worker is idle: no 20 s window for a lone request
        assert batcher.submit(Job("a", ["alone"], 1)).result(timeout=10) == ["alone"]
    finally:
        batcher.stop()


def test_a_worker_waits_only_while_company_could_join_and_stops_when_another_is_free():
    release = threading.Event()

    def run(jobs: list[Job]) -> list:
        if jobs[0].texts == ["slow"]:
            release.wait(30)
        return [job.texts for job in jobs]

    batcher = Batcher(run, BatchSettings(max_wait_ms=20_000, workers=2))
    batcher.start()
    try:
        slow = batcher.submit(Job("a", ["slow"], 10))
        time.sleep(0.2)  # its pass holds one worker
        # as large as the pass running: nothing could join it within its share, so no wait
        assert batcher.submit(Job("a", ["big"], 10)).result(timeout=10) == ["big"]
        small = batcher.submit(Job("a", ["small"], 1))  # room for company: it waits...
        time.sleep(0.2)
        assert not small.done()
        release.set()  # ...until the other worker is free, not for the whole 20 s
        assert small.result(timeout=10) == ["small"] and slow.result(timeout=10) == ["slow"]
    finally:
        release.set()
        batcher.stop()


def test_a_batch_takes_its_share_of_the_queue_and_the_other_worker_the_rest():
    sizes, both_running = [], threading.Barrier(2, timeout=30)

    def run(jobs: list[Job]) -> list:
        sizes.append(len(jobs))
        both_running.wait()  # broken if one worker took the whole queue
        return [job.texts for job in jobs]

    batcher = Batcher(run, BatchSettings(max_wait_ms=1, workers=2))
    futures = [batcher.submit(Job("a", [str(i)], 1)) for i in range(8)]  # queued before start
    batcher.start()
    try:
        assert [f.result(timeout=60) for f in futures] == [[str(i)] for i in range(8)]
        assert sizes == [4, 4]
    finally:
        batcher.stop()


def test_stop_finishes_every_queued_job_on_every_worker():
    batcher = Batcher(lambda jobs: [job.texts for job in jobs],
                      BatchSettings(max_wait_ms=1, max_tokens=3, workers=3))
    futures = [batcher.submit(Job("a", [str(i)], 1)) for i in range(10)]  # queued before start
    batcher.start()
    batcher.stop()
    assert [f.result(timeout=0) for f in futures] == [[str(i)] for i in range(10)]


def test_an_attach_waits_for_the_passes_running_and_holds_off_new_ones():
    lock, events = PassLock(), []
    first_in, change_waiting = threading.Event(), threading.Event()

    def long_pass():
        with lock.passing():
            first_in.set()
            change_waiting.wait(30)
            time.sleep(0.2)  # the change and the late pass are both waiting by now
            events.append("first pass ends")

    def change():
        first_in.wait(30)
        change_waiting.set()
        with lock.changing():
            events.append("change")

    def late_pass():
        change_waiting.wait(30)
        time.sleep(0.1)  # asks after the change did
        with lock.passing():
            events.append("late pass")

    threads = [threading.Thread(target=f) for f in (long_pass, change, late_pass)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert events == ["first pass ends", "change", "late pass"]


def test_a_body_labelled_as_a_form_is_read_as_json(url, adapters):
    """`curl -d` labels its body application/x-www-form-urlencoded."""
    body = '{"adapter": "__base__", "inputs": ["a film"]}'
    answer = httpx.post(f"{url}/v1/predict", content=body,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 200
    assert answer.json()["predictions"][0]["text"] == "a film"


def test_a_refused_composed_adapter_leaves_nothing_attached(tiny_base_dir, tmp_path):
    """A composed adapter refused midway (its second component's name is held by another
    version) left its first component attached: out of reach of detach and eviction, and
    uncounted."""
    from hubcli.errors import AdapterError

    for where, seed in (("one", 1), ("two", 2)):  # two different adapters named "shared"
        make_adapter_dir(tmp_path / where / "shared", name="shared", seed=seed)
    make_adapter_dir(tmp_path / "fresh", name="fresh", seed=3)
    make_adapter_dir(tmp_path / "first", name="first", seed=4,
                     requires=[requirement(tmp_path / "one" / "shared")])
    make_adapter_dir(tmp_path / "second", name="second", seed=5, requires=[
        requirement(tmp_path / "fresh"), requirement(tmp_path / "two" / "shared")])
    engine = Engine(str(tiny_base_dir), **POLICY)
    first = engine.attach(tmp_path / "first")
    with pytest.raises(AdapterError, match="component shared: another adapter of this name is "
                                           "attached already"):
        engine.attach(tmp_path / "second")
    assert sorted(engine.hub.model.infos) == ["shared", first]
    engine.detach(first)
    assert engine.hub.model.infos == {} and engine.hub.model.sources == {}


def over_two_versions(tmp_path) -> tuple[str, str]:
    """Two adapter folders, each requiring its own version of a component named "shared"."""
    for where, seed in (("one", 1), ("two", 2)):
        make_adapter_dir(tmp_path / where / "shared", name="shared", seed=seed)
        make_adapter_dir(tmp_path / f"on-{where}", name=f"on-{where}", seed=seed + 2,
                         requires=[requirement(tmp_path / where / "shared")])
    return str(tmp_path / "on-one"), str(tmp_path / "on-two")


def test_an_idle_adapter_holding_another_version_of_a_component_makes_way(tiny_base_dir,
                                                                          tmp_path):
    """Two composed adapters over two versions of one component's name cannot be attached at
    once; the pool refused the second for good (422 to every request for it, at start-up a
    refusal to start) while the first sat idle. Now the idle one is detached, served on
    demand, and makes way in turn; one with requests waiting does not."""
    from hubcli.errors import ComponentError
    from hubcli.serving.batcher import Busy

    one, two = over_two_versions(tmp_path)
    said: list[str] = []
    pool = Pool(Engine(str(tiny_base_dir), **POLICY), notify=said.append, yield_s=0.5)
    pool.add(one)
    pool.add(two)
    assert list(pool.listing()) == ["__base__", two] and pool.evicted() == [one]
    assert said == [f"notice: {one} detached: {two} needs another version of its component "
                    "shared; each is loaded again on its next request"]
    assert pool.acquire(one) is None and pool.fetch(one).result(timeout=60)
    assert list(pool.listing()) == ["__base__", one] and pool.evicted() == [two]
    slot = pool.acquire(one)  # a request for it waits: it stays, the other is to retry
    with pytest.raises(Busy, match=f"{two} needs another version of its component shared, "
                                   f"which {one} holds for requests under way"):
        pool.fetch(two).result(timeout=60)
    pool.release(slot)
    assert pool.engine.hub.model.sources.keys() == {"shared", slot}
    # under load, each request for either is answered, or told to retry (never refused
    # for good: the one whose component is held by the other's requests got a 422 each time)
    with running(pool, ServeSettings()) as (url, _server), ThreadPoolExecutor(8) as ex:
        answers = list(ex.map(lambda k: httpx.post(
            f"{url}/v1/predict", json={"adapter": (one, two)[k % 2], "inputs": ["a film"]},
            timeout=60), range(40)))
    assert {a.status_code for a in answers} <= {200, 503}
    assert all(a.headers["retry-after"] == "1" for a in answers if a.status_code == 503)
    # one needing both versions itself can never be attached: refused, displacing nothing
    make_adapter_dir(tmp_path / "both", name="both", seed=6, requires=[
        requirement(tmp_path / "one" / "shared"), requirement(tmp_path / "on-two")])
    before = list(pool.listing())
    with pytest.raises(ComponentError, match="component shared: is needed in two versions"):
        pool.add(str(tmp_path / "both"))
    assert list(pool.listing()) == before and len(before) == 2


def test_an_adapter_in_steady_use_makes_way_in_turn_for_another_version(tiny_base_dir,
                                                                        tmp_path):
    """The holder of a component's name with requests always under way kept it for good: the
    other version's adapter was told to retry on every request, and starved (16 clients on
    one: the other 0 answers of 12 tries in 15 s). Now the other's load waits: the holder
    takes no new request meanwhile (they wait their turn), and is detached once its requests
    are answered. One loaded for requests has a turn first; the wait is bounded."""
    from hubcli.serving.pool import TURN_S, Turn

    one, two = over_two_versions(tmp_path)
    pool = Pool(Engine(str(tiny_base_dir), **POLICY), yield_s=60)
    pool.add(one)
    busy = pool.acquire(one)  # a request under way
    waiting = pool.fetch(two)
    turn = f"^{one} makes way for {two}, which needs another version of its component shared: " \
           "its turn comes next$"
    for _ in range(500):  # the load marks one as making way as it starts waiting
        try:
            pool.release(pool.acquire(one))
            time.sleep(0.01)
        except Turn as err:
            assert re.match(turn, str(err))
            break
    with pytest.raises(Turn, match=turn):
        pool.acquire(one)
    assert not waiting.done()
    pool.release(busy)
    waiting.result(timeout=60)  # one's request answered: two's turn
    assert list(pool.listing()) == ["__base__", two] and pool.evicted() == [one]
    # two was loaded for requests: one, asked for again, waits out two's turn
    started = time.monotonic()
    assert pool.acquire(one) is None and pool.fetch(one, reload=True).result(timeout=60)
    assert time.monotonic() - started >= TURN_S * 0.9
    assert list(pool.listing()) == ["__base__", one]
    # the wait is bounded: past it, the load is told to retry, and one takes requests again
    time.sleep(TURN_S)
    pool.yield_s = 0.3
    busy = pool.acquire(one)
    with pytest.raises(Turn, match=f"{two} needs another version of its component shared, "
                                   f"which {one} holds for requests under way"):
        pool.fetch(two).result(timeout=60)
    pool.release(pool.acquire(one))
    pool.release(busy)


def test_steady_traffic_to_one_version_leaves_the_other_answered(tiny_base_dir, tmp_path):
    """Under steady traffic to the holder (8 clients), a client of the other version gets
    answers, and nobody is told to retry (the turns are well within the wait)."""
    one, two = over_two_versions(tmp_path)
    pool = Pool(Engine(str(tiny_base_dir), **POLICY), yield_s=30)
    pool.add(two)
    pool.add(one)  # two evicted: served on demand
    statuses: dict[str, list[int]] = {one: [], two: []}
    stop = threading.Event()

    def client(name: str) -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set() and len(statuses[two]) < 5:
                statuses[name].append(http.post(f"{url}/v1/predict", json={
                    "adapter": name, "inputs": ["a film"]}).status_code)

    with running(pool, ServeSettings()) as (url, _server), ThreadPoolExecutor(9) as ex:
        for future in [ex.submit(client, one) for _ in range(8)] + [ex.submit(client, two)]:
            try:
                future.result(timeout=60)
            finally:
                stop.set()
    assert len(statuses[two]) == 5 and len(statuses[one]) > 0
    assert set(statuses[one]) | set(statuses[two]) == {200}


def test_holders_of_other_versions_are_found_through_fusions_and_all_make_way(tiny_base_dir,
                                                                              tmp_path):
    """A holder was looked for among the model's names, where a fusion component is its
    block's ("Fuse(a, b)"), so a stack over another version of a fusion got a 503 forever;
    and an adapter needing two components that two idle adapters held other versions of
    failed its first try (at start-up: hub serve refused to start)."""
    from factories import FUSION

    a, b = (make_adapter_dir(tmp_path / n, name=n, seed=k) for k, n in enumerate("ab"))
    for version, seed in (("v1", 3), ("v2", 4)):
        make_adapter_dir(tmp_path / version / "fab", name="fab", seed=seed, architecture=FUSION,
                         requires=[requirement(a), requirement(b)])
        make_adapter_dir(tmp_path / f"on-{version}", name=f"on-{version}", seed=seed + 2,
                         requires=[requirement(tmp_path / version / "fab")])
    on1, on2 = (str(tmp_path / f"on-{v}") for v in ("v1", "v2"))
    pool = Pool(Engine(str(tiny_base_dir), **POLICY))
    pool.add(on1)
    pool.add(on2)
    assert list(pool.listing()) == ["__base__", on2] and pool.evicted() == [on1]
    for name, (version, seed) in (("x", ("v1", 7)), ("y", ("v1", 8)), ("x", ("v2", 9)),
                                  ("y", ("v2", 10))):
        make_adapter_dir(tmp_path / version / name, name=name, seed=seed)
    for user, version in (("uses-x", "v1"), ("uses-y", "v1")):
        make_adapter_dir(tmp_path / user, name=user, seed=11,
                         requires=[requirement(tmp_path / version / user[-1])])
    make_adapter_dir(tmp_path / "both", name="both", seed=12, requires=[
        requirement(tmp_path / "v2" / "x"), requirement(tmp_path / "v2" / "y")])
    names = [str(tmp_path / n) for n in ("uses-x", "uses-y", "both")]
    pool = Pool.for_adapters(names, base=str(tiny_base_dir), **POLICY)
    assert list(pool.listing()) == ["__base__", names[2]] and pool.evicted() == names[:2]


def test_a_request_does_not_reload_an_adapter_unloaded_since_it_looked(adapters,
                                                                      tiny_base_dir):
    """An unload between a request's acquire (not attached) and its load was undone by the
    load, after the unload had answered 200."""
    import asyncio

    from hubcli.serving.service import Service

    pool = Pool(Engine(str(tiny_base_dir), **POLICY), max_adapters=1)
    sst, lora, _ = adapters.values()
    for path in (sst, lora):
        pool.add(path)
    acquire = pool.acquire

    def unloaded_once_looked(name: str) -> str | None:  # an unload lands just then
        slot = acquire(name)
        if slot is None and name in pool.names():
            pool.remove(name)
        return slot

    pool.acquire = unloaded_once_looked
    service = Service(pool)
    service.start()  # a reload that went ahead would be answered, not wait for ever
    try:
        answer = asyncio.run(service.predict(sst, ["a film"]))
    finally:
        asyncio.run(service.stop())
    assert answer.status_code == 404 and pool.names() == [lora]


def test_a_fusion_over_a_stack_and_its_component_detaches_whole(tiny_base_dir, tmp_path):
    """A fusion over (s1 = a stacked on a, a): detaching it removed a with s1, then failed
    on a ("no adapter named 'a' is loaded"), after the removal had succeeded."""
    from factories import FUSION

    a = make_adapter_dir(tmp_path / "a", name="a", seed=1)
    s1 = make_adapter_dir(tmp_path / "s1", name="s1", seed=2, requires=[requirement(a)])
    fusion = make_adapter_dir(tmp_path / "f", name="f", architecture=FUSION,
                              requires=[requirement(s1), requirement(a)])
    engine = Engine(str(tiny_base_dir), **POLICY)
    engine.detach(engine.attach(fusion))
    assert engine.hub.model.infos == {} and engine.hub.manifests == {}


def test_adapters_over_the_limits_at_start_up_are_named(adapters, tiny_base_dir):
    """`hub serve A B C --max-adapters 1` said only "serving __base__, C": A and B were
    detached without a word; an adapter larger than --max-adapter-mb alone was detached after
    its first request, silently."""
    said: list[str] = []
    sst, lora, ner = adapters.values()
    pool = Pool.for_adapters([sst, lora, ner], base=str(tiny_base_dir), max_adapters=1,
                             notify=said.append, **POLICY)
    assert list(pool.listing()) == ["__base__", ner]
    assert f"warning: {sst}, {lora} did not fit 1 adapter: detached at start-up, each " \
        "loaded again on its first request" in said
    said.clear()
    Pool.for_adapters([sst], base=str(tiny_base_dir), max_bytes=100, notify=said.append,
                      **POLICY)
    assert any(m.startswith(f"warning: {sst} holds ") and "more than 0.0 MB on its own: it "
               "is detached after each request for it" in m for m in said), said


def test_one_folder_by_two_spellings_and_the_base_are_not_served_twice_nor_unloaded(
        adapters, tiny_base_dir, monkeypatch):
    """POST /v1/adapters of ./ner and then /abs/ner attached it twice (both listed);
    DELETE of __base__ said it was not served, though listed, and 404s had no hint."""
    from pathlib import Path

    from hubcli.serving.pool import AlreadyServed, NotServed

    ner = Path(adapters["ner"])
    monkeypatch.chdir(ner.parent)
    pool = Pool(Engine(str(tiny_base_dir), **POLICY))
    pool.add("./ner")
    with pytest.raises(AlreadyServed, match=f"{ner} is served already, as './ner'"):
        pool.add(str(ner))
    assert list(pool.listing()) == ["__base__", "./ner"]
    pool.max_adapters = 1
    pool.add(adapters["sst"])  # ./ner evicted: loaded again on demand, by its own name only
    assert list(pool.listing()) == ["__base__", adapters["sst"]]
    with pytest.raises(AlreadyServed, match=f"{ner} is served already, as './ner'"):
        pool.add(str(ner))
    assert pool.acquire("./ner") is None and pool.fetch("./ner").result(timeout=60)
    with pytest.raises(NotServed, match="__base__ is the untouched base, not an adapter"):
        pool.remove("__base__")
    with pytest.raises(NotServed, match="no adapter named 'nope' is served") as refused:
        pool.remove("nope")
    # the least recently used went, and is still served: loaded again on its next request
    assert refused.value.hint == f"served: ./ner, {adapters['sst']}"
