"""Running the app under uvicorn: `hub serve`, and tests that start a real server."""

from __future__ import annotations

from typing import Callable

from hubcli.serving.accesslog import AccessLog
from hubcli.serving.app import create_app
from hubcli.serving.service import ServeSettings
from hubcli.serving.pool import Pool

# uvicorn stops accepting on SIGINT/SIGTERM, then waits this long for requests in flight
GRACEFUL_SHUTDOWN_S = 30


ACCESS_LOGS = ("json", "text", "off")


def make_server(pool: Pool, settings: ServeSettings, *, host: str, port: int,
                access_log: str = "json"):
    """A uvicorn server for `pool` (not started: `.run()` it, or `.serve()` in a loop).
    `access_log`: "json" (one JSON object per request, `accesslog.py`), "text" (uvicorn's
    lines) or "off"."""
    import uvicorn

    app = create_app(pool, settings)
    config = uvicorn.Config(AccessLog(app) if access_log == "json" else app, host=host,
                            port=port, access_log=access_log == "text",
                            log_level="warning" if access_log == "off" else "info",
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    return uvicorn.Server(config)


def serve(refs: list[str], settings: ServeSettings, *, host: str, port: int,
          access_log: str = "json", notify: Callable[[str], None] = lambda _m: None,
          **pool_options) -> None:
    """Attach every adapter in `refs` (folders or registry references, pulled and verified) to
    one base and serve them over HTTP until interrupted. `pool_options`: see
    `Pool.for_adapters` (base, attach policy, max_adapters, max_bytes, allow_pull).

    Raises:
        UsageError, RegistryError, SignatureError, BundleError, ManifestError,
        BaseMismatchError, AdapterError: an adapter cannot be attached.
    """
    if settings.batch.workers > 1:  # the workers share the CPUs: each its share of threads
        import torch

        from hubcli.serving.batcher import usable_cpus

        torch.set_num_threads(max(1, usable_cpus() // settings.batch.workers))
    pool = Pool.for_adapters(refs, notify=notify, **pool_options)
    notify(f"serving {', '.join(pool.listing())} on http://{host}:{port}")
    make_server(pool, settings, host=host, port=port, access_log=access_log).run()
