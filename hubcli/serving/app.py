"""The HTTP face of the engine (FastAPI): predict, list adapters, health, readiness, metrics.

Every refusal is one JSON object {"error": one line, "hint": ...}: 404 for an adapter not
served, 413 for too many or too long inputs (naming the limit), 422 for a body that is not the
documented JSON or an input the adapter's task cannot read, 503 with Retry-After when the queue
is full. The worker thread survives any request.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from hubcli.errors import HubError, NotFoundError, RegistryError
from hubcli.serving.batcher import Batcher, BatchSettings, Busy
from hubcli.serving.engine import Job
from hubcli.serving.metrics import Metrics
from hubcli.serving.pool import AlreadyServed, InUse, NotServed, Pool

RETRY_AFTER_S = 1
LOAD_TRIES = 3  # an adapter loaded on demand can be evicted again before its request pins it


@dataclass
class ServeSettings:
    batch: BatchSettings = field(default_factory=BatchSettings)
    max_inputs: int = 64
    max_text_chars: int = 10_000
    admin_token: str | None = None  # None: the admin endpoints (load, unload) are off


class TooLarge(HubError):
    """A request over one of the server's size limits (HTTP 413)."""


class PredictRequest(BaseModel):
    adapter: str
    inputs: list[str]


class LoadRequest(BaseModel):
    adapter: str


class PredictResponse(BaseModel):
    adapter: str
    predictions: list[dict]


def _refusal(status: int, err: HubError | str, headers: dict | None = None) -> JSONResponse:
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    hint = getattr(err, "hint", None)
    return JSONResponse({"error": message, "hint": hint}, status_code=status, headers=headers)


def _status(err: Exception) -> int:
    """The HTTP status of a refusal."""
    for kind, status in ((TooLarge, 413), (Busy, 503), (NotServed, 404), (NotFoundError, 404),
                         (InUse, 409), (AlreadyServed, 409), (RegistryError, 502), (HubError, 422)):
        if isinstance(err, kind):
            return status
    return 500


def _refuse(err: Exception) -> JSONResponse:
    status = _status(err)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    if status == 500:  # a bug in a pass: answer, keep serving
        return _refusal(500, f"prediction failed: {type(err).__name__}: {err}")
    return _refusal(status, err, headers)


def _validation_line(exc: RequestValidationError) -> str:
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return f"{where or 'body'}: {first.get('msg', 'invalid')}"


def _check_size(body: PredictRequest, settings: ServeSettings) -> None:
    """Raises TooLarge: more inputs than `max_inputs`, or a text over `max_text_chars`."""
    if len(body.inputs) > settings.max_inputs:
        raise TooLarge(f"{len(body.inputs)} inputs exceed the limit of {settings.max_inputs} "
                       "per request", hint="split the inputs over several requests")
    longest = max((len(t) for t in body.inputs), default=0)
    if longest > settings.max_text_chars:
        raise TooLarge(f"an input of {longest} characters exceeds the limit of "
                       f"{settings.max_text_chars}", hint="shorten the text")


def create_app(pool: Pool, settings: ServeSettings | None = None) -> FastAPI:
    """The ASGI app serving `pool`'s adapters; its batcher runs from startup to shutdown
    (which finishes every request already queued)."""
    settings = settings or ServeSettings()
    metrics = Metrics()
    metrics.adapter_loads.inc(len(pool))
    pool.events = metrics.adapter_event
    engine = pool.engine
    batcher = Batcher(engine.run, settings.batch, observe=metrics.observe_batch)
    state = {"ready": False}

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        state["ready"] = True
        yield
        state["ready"] = False
        await asyncio.to_thread(batcher.stop)

    app = FastAPI(title="hub serve", version="1", lifespan=lifespan)
    app.state.pool, app.state.batcher, app.state.metrics = pool, batcher, metrics

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _refusal(422, HubError(_validation_line(exc),
                                      hint='send {"adapter": NAME, "inputs": [TEXT, ...]}'))

    @app.post("/v1/predict", response_model=PredictResponse)
    async def predict(body: PredictRequest):
        start = time.perf_counter()
        response = await _answer(body)
        metrics.latency.labels(str(response.status_code)).observe(time.perf_counter() - start)
        return response

    async def _answer(body: PredictRequest) -> JSONResponse:
        try:
            _check_size(body, settings)
            slot = await _acquire(body.adapter)
        except Exception as err:
            return _refuse(err)
        try:
            job = Job(slot, body.inputs, engine.count_tokens(slot, body.inputs))
            future = batcher.submit(job)
            metrics.queue_depth.set(batcher.depth())
            rows = await asyncio.wrap_future(future)
        except Exception as err:
            return _refuse(err)
        finally:
            pool.release(slot)
        return JSONResponse({"adapter": body.adapter, "predictions": rows})

    async def _acquire(name: str) -> str:
        """Raises NotServed, Busy, or what loading raised."""
        for _ in range(LOAD_TRIES):
            slot = pool.acquire(name)
            if slot is not None:
                return slot
            await asyncio.wrap_future(pool.fetch(name))
        raise Busy(f"{name!r} was evicted again before it could be used")

    def _admin(request: Request) -> JSONResponse | None:
        """A refusal unless the request carries the admin token."""
        if settings.admin_token is None:
            return _refusal(403, HubError("the admin endpoints are off",
                                          hint="start the server with --admin-token"))
        given = request.headers.get("authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), settings.admin_token.encode()):
            return _refusal(401, HubError("a valid admin token is needed",
                                          hint="send Authorization: Bearer TOKEN"))
        return None

    @app.post("/v1/adapters")
    async def load(body: LoadRequest, request: Request) -> JSONResponse:
        if (refused := _admin(request)) is not None:
            return refused
        try:
            await asyncio.wrap_future(pool.fetch(body.adapter))
        except Exception as err:
            return _refuse(err)
        return JSONResponse(pool.listing().get(body.adapter) or {"name": body.adapter}, 201)

    @app.delete("/v1/adapters/{name:path}")
    async def unload(name: str, request: Request) -> JSONResponse:
        if (refused := _admin(request)) is not None:
            return refused
        try:
            await asyncio.to_thread(pool.remove, name)
        except Exception as err:
            return _refuse(err)
        return JSONResponse({"removed": name})

    @app.get("/v1/adapters")
    async def adapters() -> dict:
        return {"adapters": list(pool.listing().values())}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if not state["ready"]:
            return _refusal(503, "not ready", {"Retry-After": str(RETRY_AFTER_S)})
        return JSONResponse({"status": "ready", "adapters": len(pool)})

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.queue_depth.set(batcher.depth())
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    return app
