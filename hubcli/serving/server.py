"""Running the app under uvicorn: `hub serve`, and tests that start a real server."""

from __future__ import annotations

from typing import Callable

from hubcli.serving.app import ServeSettings, create_app
from hubcli.serving.engine import Engine

# uvicorn stops accepting on SIGINT/SIGTERM, then waits this long for requests in flight
GRACEFUL_SHUTDOWN_S = 30


def make_server(engine: Engine, settings: ServeSettings, *, host: str, port: int,
                access_log: bool = True):
    """A uvicorn server for `engine` (not started: `.run()` it, or `.serve()` in a loop)."""
    import uvicorn

    config = uvicorn.Config(create_app(engine, settings), host=host, port=port,
                            access_log=access_log, log_level="info" if access_log else "warning",
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    return uvicorn.Server(config)


def serve(refs: list[str], settings: ServeSettings, *, host: str, port: int,
          base: str | None = None, allow_unsigned: bool = False,
          allow_base_mismatch: bool = False,
          notify: Callable[[str], None] = lambda _m: None) -> None:
    """Attach every adapter in `refs` (folders or registry references, pulled and verified) to
    one base and serve them over HTTP until interrupted.

    Raises:
        UsageError, RegistryError, SignatureError, BundleError, ManifestError,
        BaseMismatchError, AdapterError: an adapter cannot be attached.
    """
    engine = Engine.for_adapters(refs, base=base, allow_unsigned=allow_unsigned,
                                 allow_base_mismatch=allow_base_mismatch, notify=notify)
    notify(f"serving {', '.join(engine.listing())} on http://{host}:{port}")
    make_server(engine, settings, host=host, port=port).run()
