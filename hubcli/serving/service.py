"""What `hub serve` does per request, whatever carries it (the FastAPI app, a Ray Serve
replica): size limits, the adapter's slot (loaded on demand when allowed), the batcher, the
metrics, and every refusal as one JSON object {"error": one line, "hint": ...}.

Statuses: 404 an adapter not served, 413 too many or too long inputs (naming the limit), 422 a
body that is not the documented JSON or an input the adapter cannot take (or a bundle that does
not verify), 409 a conflict (loaded already, in use), 502 the registry failed, 503 with
Retry-After when the queue is full. The worker thread survives any request.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from starlette.responses import JSONResponse

from hubcli.errors import HubError, NotFoundError, OptionError, RegistryError
from hubcli.serving.batcher import Batcher, BatchSettings, Busy
from hubcli.serving.engine import Job
from hubcli.serving.metrics import Metrics
from hubcli.serving.pool import TURN_POLL_S, AlreadyServed, InUse, NotServed, Pool, Turn

RETRY_AFTER_S = 1
LOAD_TRIES = 3  # an adapter loaded on demand can be evicted again before its request pins it
BODY_HINT = 'send {"adapter": NAME, "inputs": [TEXT, ...]}'


@dataclass
class ServeSettings:
    batch: BatchSettings = field(default_factory=BatchSettings)
    max_inputs: int = 64
    max_text_chars: int = 10_000
    admin_token: str | None = None  # None: the admin endpoints (load, unload) are off
    tokens: tuple[str, ...] = ()  # bearer tokens for predicting; empty: predicting is open

    def __post_init__(self) -> None:
        """Raises OptionError: a blank token, which a request without one would match."""
        for option, token in [("--admin-token", self.admin_token),
                              *(("--token", t) for t in self.tokens)]:
            if token is not None and not token.strip():
                raise OptionError(option, token, "a blank token lets in a request that "
                                  "sends none", hint="give a secret; leave the option out "
                                  "for " + ("no admin endpoints" if option == "--admin-token"
                                            else "predicting open to all"))


class TooLarge(HubError):
    """A request over one of the server's size limits (HTTP 413)."""


def refusal(status: int, err: HubError | str, headers: dict | None = None) -> JSONResponse:
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    hint = getattr(err, "hint", None)
    # what the client sent may be quoted back, a lone surrogate in it too, which no UTF-8
    # body can hold: escaped, as JSON would have it
    return JSONResponse({"error": _encodable(message), "hint": _encodable(hint)},
                        status_code=status, headers=headers)


def _encodable(text: str | None) -> str | None:
    return None if text is None else text.encode("utf-8", "backslashreplace").decode()


def status_of(err: Exception) -> int:
    """The HTTP status of a refusal."""
    for kind, status in ((TooLarge, 413), (Busy, 503), (NotServed, 404), (NotFoundError, 404),
                         (InUse, 409), (AlreadyServed, 409), (RegistryError, 502),
                         (HubError, 422)):
        if isinstance(err, kind):
            return status
    return 500


def refuse(err: Exception) -> JSONResponse:
    status = status_of(err)
    if status == 500:  # a bug in a pass: answer, keep serving
        return refusal(500, f"prediction failed: {type(err).__name__}: {err}")
    return refusal(status, err, {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None)


def validation_line(errors: list[dict]) -> str:
    """One line for pydantic's first validation error."""
    first = errors[0]
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return f"{where or 'body'}: {first.get('msg', 'invalid')}"


class Service:
    """A pool's adapters behind one batcher, with metrics. `start` before the first request,
    `stop` (finishing every queued request) after the last."""

    def __init__(self, pool: Pool, settings: ServeSettings | None = None) -> None:
        self.pool = pool
        self.settings = settings or ServeSettings()
        self.metrics = Metrics()
        self.metrics.adapter_loads.inc(len(pool))
        pool.events = self.metrics.adapter_event
        self.batcher = Batcher(pool.engine.run, self.settings.batch,
                               observe=self.metrics.observe_batch)
        self.ready = False

    def start(self) -> None:
        self.batcher.start()
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        await asyncio.to_thread(self.batcher.stop)

    async def predict(self, adapter: str, inputs: list[str]) -> JSONResponse:
        """{"adapter", "predictions"}: per input what `hub predict --json` prints; or a
        refusal."""
        start = time.perf_counter()
        response = await self._answer(adapter, inputs)
        self.metrics.latency.labels(str(response.status_code)).observe(time.perf_counter() - start)
        return response

    async def load(self, name: str, *, reload: bool = False) -> None:
        """Attach `name` (once, however many ask at once); `reload`: for a request, only
        while it is served (`Pool.fetch`).

        Raises:
            AlreadyServed, NotServed (`reload`), and what `Pool.add` raises.
        """
        await asyncio.wrap_future(self.pool.fetch(name, reload=reload))

    def render_metrics(self) -> bytes:
        self.metrics.queue_depth.set(self.batcher.depth())
        return self.metrics.render()

    async def _answer(self, adapter: str, inputs: list[str]) -> JSONResponse:
        try:
            self._check_size(inputs)
            slot = await self._acquire(adapter)
        except Exception as err:
            return refuse(err)
        try:
            # off the event loop: a long request's tokenizing would hold up every other
            tokens = await asyncio.to_thread(self.pool.engine.count_tokens, slot, inputs)
            job = Job(slot, inputs, tokens)
            future = self.batcher.submit(job)
            self.metrics.queue_depth.set(self.batcher.depth())
            rows = await asyncio.wrap_future(future)
        except Exception as err:
            return refuse(err)
        finally:  # off the event loop: an eviction it makes waits for the passes running
            await asyncio.to_thread(self.pool.release, slot)
        return JSONResponse({"adapter": adapter, "predictions": rows})

    async def _acquire(self, name: str) -> str:
        """The slot of `name`, pinned; loaded on demand, and waiting up to the pool's
        `yield_s` while it makes way for another version of one of its components.

        Raises:
            NotServed, Busy, Turn, or what loading raised.
        """
        deadline = time.monotonic() + self.pool.yield_s
        loads = 0
        while True:
            try:
                slot = self.pool.acquire(name)
            except Turn:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(TURN_POLL_S)
                continue
            if slot is not None:
                return slot
            if loads == LOAD_TRIES:
                raise Busy(f"{name!r} was evicted again before it could be used")
            loads += 1
            await self.load(name, reload=True)

    def _check_size(self, inputs: list[str]) -> None:
        """Raises TooLarge: more inputs than `max_inputs`, or a text over `max_text_chars`."""
        limits = self.settings
        if len(inputs) > limits.max_inputs:
            raise TooLarge(f"{len(inputs)} inputs exceed the limit of {limits.max_inputs} "
                           "per request", hint="split the inputs over several requests")
        longest = max((len(t) for t in inputs), default=0)
        if longest > limits.max_text_chars:
            raise TooLarge(f"an input of {longest} characters exceeds the limit of "
                           f"{limits.max_text_chars}", hint="shorten the text")
