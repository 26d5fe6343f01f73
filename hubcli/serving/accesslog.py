"""Structured access logs for `hub serve`: one JSON object per HTTP request, on the
`hub.serve.access` logger (stderr by default), for log shippers and `jq`.

A plain ASGI middleware rather than Starlette's `BaseHTTPMiddleware`, which runs every request
through an extra task and stream and costs requests/s. A route adds fields of its own through
`request.state.log` (a dict): predict adds the adapter and the number of inputs.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

LOGGER = "hub.serve.access"


def json_lines_logger() -> logging.Logger:
    """The access logger, writing bare JSON lines to stderr (once, however often called)."""
    logger = logging.getLogger(LOGGER)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class AccessLog:
    """Wraps an ASGI app; `write` gets one record per HTTP request once it is answered."""

    def __init__(self, app: Callable, write: Callable[[dict[str, Any]], None] | None = None):
        self.app = app
        self.write = write or (lambda record: json_lines_logger().info(json.dumps(record)))

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]  # 500 unless a response starts

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            self.write({
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "client": client[0] if client else None,
                "method": scope["method"], "path": scope["path"], "status": status[0],
                "ms": round((time.perf_counter() - start) * 1000, 2),
                **scope.get("state", {}).get("log", {})})
