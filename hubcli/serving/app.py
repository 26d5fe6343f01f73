"""The HTTP face of `hub serve` (FastAPI): predict, list, load and unload adapters, health,
readiness, metrics, and an OpenAPI document at /docs. What a request does is `Service`'s."""

from __future__ import annotations

import asyncio
import hmac
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from hubcli.errors import HubError
from hubcli.serving.pool import Pool
from hubcli.serving.service import (BODY_HINT, RETRY_AFTER_S, ServeSettings, Service, refusal,
                                    refuse, validation_line)


class PredictRequest(BaseModel):
    adapter: str
    inputs: list[str] = Field(min_length=1)  # none: nothing to predict, a client's slip


class PredictResponse(BaseModel):
    adapter: str
    predictions: list[dict]


class LoadRequest(BaseModel):
    adapter: str


class BodiesAreJson:
    """ASGI middleware: every body this API takes is JSON, and `curl -d` (the README's and
    every quick test's way) labels its body application/x-www-form-urlencoded, which FastAPI
    would not parse; so a body is read as JSON whatever its label."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


def create_app(pool: Pool, settings: ServeSettings | None = None) -> FastAPI:
    """The ASGI app serving `pool`'s adapters; its batcher runs from startup to shutdown
    (which finishes every request already queued). With `settings.tokens`, predicting and
    listing need one of them (or the admin token) as a bearer token; /health, /ready and
    /metrics stay open for probes and scrapers."""
    service = Service(pool, settings)
    settings = service.settings

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        service.start()
        yield
        await service.stop()

    app = FastAPI(title="hub serve", version="1", lifespan=lifespan)
    app.state.service = service
    app.add_middleware(BodiesAreJson)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return refusal(422, HubError(validation_line(exc.errors()), hint=BODY_HINT))

    @app.exception_handler(StarletteHTTPException)
    async def elsewhere(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # an unknown path or method: the one refusal shape, not the framework's {"detail"}
        return refusal(exc.status_code, HubError(
            f"{request.method} {request.url.path}: {str(exc.detail).lower()}",
            hint="see GET /docs for the endpoints and their methods"), exc.headers)

    @app.post("/v1/predict", response_model=PredictResponse)
    async def predict(body: PredictRequest, request: Request):
        request.state.log = {"adapter": body.adapter, "inputs": len(body.inputs)}
        if (refused := _client(request)) is not None:
            return refused
        return await service.predict(body.adapter, body.inputs)

    def _bearer(request: Request, tokens: list[str], what: str) -> JSONResponse | None:
        """A 401 refusal unless the request carries one of `tokens`."""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        # the scheme's case is the client's (RFC 9110); without it nothing is given
        given = credentials.strip().encode() if scheme.lower() == "bearer" else b""
        # every token compared, in constant time each: no early exit tells which came close
        if not sum(hmac.compare_digest(given, t.encode()) for t in tokens):
            return refusal(401, HubError(f"a valid {what} token is needed",
                                         hint="send Authorization: Bearer TOKEN"))
        return None

    def _client(request: Request) -> JSONResponse | None:
        """A refusal unless predicting is open or the request carries a predict token (the
        admin token serves too)."""
        if not settings.tokens:
            return None
        return _bearer(request, [*settings.tokens, *filter(None, [settings.admin_token])],
                       "predict")

    def _admin(request: Request) -> JSONResponse | None:
        """A refusal unless the request carries the admin token."""
        if settings.admin_token is None:
            return refusal(403, HubError("the admin endpoints are off",
                                         hint="start the server with --admin-token"))
        return _bearer(request, [settings.admin_token], "admin")

    @app.post("/v1/adapters")
    async def load(body: LoadRequest, request: Request) -> JSONResponse:
        if (refused := _admin(request)) is not None:
            return refused
        try:
            await service.load(body.adapter)
        except Exception as err:
            return refuse(err)
        return JSONResponse(pool.listing().get(body.adapter) or {"name": body.adapter}, 201)

    @app.delete("/v1/adapters/{name:path}")
    async def unload(name: str, request: Request) -> JSONResponse:
        if (refused := _admin(request)) is not None:
            return refused
        try:
            await asyncio.to_thread(pool.remove, name)
        except Exception as err:
            return refuse(err)
        return JSONResponse({"removed": name})

    @app.get("/v1/adapters")
    async def adapters(request: Request):
        if (refused := _client(request)) is not None:
            return refused
        # attached, described; evicted by the limits, named: loaded again on their next request
        return {"adapters": list(pool.listing().values()), "on_demand": pool.evicted()}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if not service.ready:
            return refusal(503, "not ready", {"Retry-After": str(RETRY_AFTER_S)})
        return JSONResponse({"status": "ready", "adapters": len(pool)})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(service.render_metrics(), media_type="text/plain; version=0.0.4")

    return app
