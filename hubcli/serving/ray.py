"""`hub serve` beyond one machine: the same pool, batcher and refusals as a Ray Serve deployment
(the [ray] extra).

Ray's model multiplexing does the routing: a request names its adapter in the
`serve_multiplexed_model_id` header, Ray sends it to a replica that holds that adapter when one
does, and each replica keeps at most `MAX_ADAPTERS_PER_REPLICA` adapters (Ray's LRU, and the
replica's pool with the same bound), so N replicas on M machines serve N times as many. An
adapter a replica does not hold is pulled from the registry and verified, as `hub serve
--allow-pull` does. Within a replica, requests for any mix of its adapters share forward passes.

    hub serve --ray --replicas 4 alice/sst2-adapter ./ner-adapter   # a local Ray, or RAY_ADDRESS
    serve run hubcli.serving.ray:app                       # the packaged base, 1 replica
    serve run hubcli.serving.ray:build replicas=4 adapters=alice/sst2-adapter,./ner-adapter
    curl localhost:8000/v1/predict -H 'serve_multiplexed_model_id: alice/sst2-adapter' \\
         -d '{"inputs": ["a fine film"]}'

A body in `hub serve`'s own form, {"adapter": NAME, "inputs": [...]}, is answered too, but
only the header lets Ray send the request to a replica that holds the adapter already. A
replica answers POST /v1/predict, GET /health and GET /ready; anything else is a 404 in the one
refusal shape (listing, loading and metrics are `hub serve`'s without Ray).

Without RAY_ADDRESS, `hub serve --ray` starts a Ray of its own (never joining a `ray start`
cluster on the machine, as Ray would by default) and stops it at the end; on RAY_ADDRESS's
cluster (`auto`: the one `ray start` started here) it deletes its own application only, and
Serve's HTTP proxy keeps the host and port it was started with, if it was. A replica serves
under any route prefix (`serve run --route-prefix /hub ...`: /hub/v1/predict).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

from pydantic import BaseModel, Field, ValidationError
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from hubcli.errors import HubError
from hubcli.serving.batcher import BatchSettings
from hubcli.serving.pool import Pool, Turn
from hubcli.serving.service import ServeSettings, Service, refusal, refuse, validation_line

MAX_ADAPTERS_PER_REPLICA = 16
HEADER = "serve_multiplexed_model_id"


class Inputs(BaseModel):
    inputs: list[str] = Field(min_length=1)
    adapter: str | None = None  # `hub serve`'s body; the header wins


@serve.deployment
class AdapterReplica:
    """One base and up to MAX_ADAPTERS_PER_REPLICA adapters in one Ray Serve replica."""

    def __init__(self, adapters: list[str] | None = None, base: str | None = None,
                 allow_unsigned: bool = False, allow_base_mismatch: bool = False,
                 settings: ServeSettings | None = None) -> None:
        pool = Pool.for_adapters(list(adapters or []), base=base, allow_unsigned=allow_unsigned,
                                 allow_base_mismatch=allow_base_mismatch, allow_pull=True,
                                 max_adapters=MAX_ADAPTERS_PER_REPLICA)
        self.service = Service(pool, settings or ServeSettings())
        self.service.start()

    @serve.multiplexed(max_num_models_per_replica=MAX_ADAPTERS_PER_REPLICA)
    async def adapter(self, name: str) -> str:
        """Attach `name` here unless it is (Ray calls this once per adapter and replica).

        Raises:
            NotServed, and what `Pool.add` raises.
        """
        pool = self.service.pool
        try:
            slot = pool.acquire(name)  # NotServed: neither held nor a registry reference
        except Turn:  # attached, making way for another version's: the request waits its turn
            return name
        if slot is None:
            await self.service.load(name)
        else:
            pool.release(slot)
        return name

    async def __call__(self, request: Request) -> JSONResponse:
        route = (request.method, _within(request))
        if route in (("GET", "/health"), ("GET", "/ready")):
            return JSONResponse({"status": "ok" if route[1] == "/health" else "ready"})
        if route != ("POST", "/v1/predict"):
            return refusal(404, HubError(f"{request.method} {request.url.path}: not found",
                                         hint="POST /v1/predict; GET /health, /ready"))
        try:
            body = Inputs.model_validate_json(await request.body())
        except ValidationError as err:
            return refusal(422, HubError(validation_line(err.errors()),
                                         hint='send {"inputs": [TEXT, ...]}'))
        name = serve.get_multiplexed_model_id() or body.adapter
        if not name:
            return refusal(422, HubError("the request names no adapter",
                                         hint=f"send the {HEADER} header"))
        try:
            await self.adapter(name)
        except Exception as err:
            return refuse(err)
        return await self.service.predict(name, body.inputs)

    def __del__(self) -> None:
        service = getattr(self, "service", None)  # none where __init__ failed
        if service is not None:
            service.batcher.stop()  # finish what is queued


def _within(request: Request) -> str:
    """The request's path below the application's route prefix, which Ray's proxy leaves in
    the path (and gives as the root path): `/hub/v1/predict` under `--route-prefix /hub`."""
    path, prefix = request.url.path.rstrip("/"), request.scope.get("root_path", "").rstrip("/")
    if prefix and (path == prefix or path.startswith(prefix + "/")):
        return path[len(prefix):]
    return path


def build(args: dict[str, str]):
    """The application for `serve run hubcli.serving.ray:build key=value ...`: adapters
    (comma-separated), base, replicas, max_wait_ms, allow_unsigned, allow_base_mismatch."""
    def flag(key: str) -> bool:
        return str(args.get(key, "")).lower() in ("1", "true", "yes")

    adapters = [a for a in str(args.get("adapters", "")).split(",") if a]
    settings = ServeSettings(BatchSettings(max_wait_ms=float(args.get("max_wait_ms", 5.0))))
    return AdapterReplica.options(num_replicas=int(args.get("replicas", 1))).bind(
        adapters, args.get("base"), flag("allow_unsigned"), flag("allow_base_mismatch"),
        settings)


def run(adapters: list[str], *, replicas: int, host: str, port: int,
        settings: ServeSettings, base: str | None = None, allow_unsigned: bool = False,
        allow_base_mismatch: bool = False,
        notify: Callable[[str], None] = lambda _m: None) -> None:
    """`hub serve --ray`: `replicas` replicas on the Ray cluster at RAY_ADDRESS (else one of
    its own, started here), HTTP on host:port, until SIGINT or SIGTERM; then the application is
    deleted (replicas finish what they have queued), and a Ray started here stops.

    Raises:
        UsageError: an adapter folder that is not there (checked here, before Ray starts).
        HubError: the cluster cannot be reached, or the application does not deploy.
    """
    import ray

    _check_folders(adapters)
    stop = threading.Event()
    address = os.environ.get("RAY_ADDRESS") or None
    shared = address not in (None, "local")
    try:  # "local": a Ray of its own, not a `ray start` cluster Ray would otherwise join
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False)
    except ConnectionError as err:
        raise HubError(f"cannot reach the Ray cluster at RAY_ADDRESS={address}: {err}",
                       hint="start it (`ray start --head`), or unset RAY_ADDRESS for a Ray "
                            "of hub's own") from None
    # after ray.init, which sets a handler of its own (a stack dump, no clean-up); from here
    # a SIGTERM during start-up stops it cleanly too
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        _deploy(adapters, replicas, host, port, settings, base, allow_unsigned,
                allow_base_mismatch, shared, notify)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        if shared:  # others' applications stay, and the Serve they run on
            serve.delete("hub")
        else:
            serve.shutdown()
        ray.shutdown()


def _deploy(adapters: list[str], replicas: int, host: str, port: int, settings: ServeSettings,
            base: str | None, allow_unsigned: bool, allow_base_mismatch: bool, shared: bool,
            notify: Callable[[str], None]) -> None:
    """Start Serve (kept as it is on a shared cluster) and run the application "hub".

    Raises:
        HubError: the application does not deploy (a replica fails to start).
    """
    import ray

    cpus = ray.cluster_resources().get("CPU", 0)
    if replicas > cpus:
        notify(f"warning: {replicas} replicas need a CPU each and the cluster has {cpus:g}: "
               "the others wait until CPUs are free")
    serve.start(http_options={"host": host, "port": port})
    app = AdapterReplica.options(num_replicas=replicas).bind(
        adapters, base, allow_unsigned, allow_base_mismatch, settings)
    try:
        serve.run(app, name="hub", route_prefix="/")
    except RuntimeError as err:
        raise HubError(f"the Ray Serve application did not deploy: {str(err).splitlines()[0]}",
                       hint="a replica failed to start: see its log under "
                            "/tmp/ray/session_latest/logs/serve") from None
    if shared:  # a Serve running there already keeps its own host and port
        notify(f"serving on Ray, {replicas} replica(s), at POST /v1/predict on the cluster's "
               "Serve HTTP proxy (--host and --port apply only where Serve was not running)")
    else:
        notify(f"serving on Ray, {replicas} replica(s), on http://{host}:{port}/v1/predict")


def _check_folders(adapters: list[str]) -> None:
    """Raises UsageError (as `resolve_adapter`), ManifestError: a folder among `adapters` that
    is not there, or holds no adapter (a registry reference is each replica's to pull)."""
    from hubcli.format import manifest as manifest_io
    from hubcli.format.vocab import BASE
    from hubcli.remote.refs import resolve_adapter
    from hubcli.serving.pool import is_registry_ref

    for ref in adapters:
        if ref != BASE and not is_registry_ref(ref):
            manifest_io.read(resolve_adapter(ref, notify=lambda _m: None))


app = build({})
