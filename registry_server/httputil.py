"""Small request/response helpers shared by the blueprints."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from flask import current_app, request

from registry_server.errors import BadRequest, PayloadTooLarge
from registry_server.models import as_utc

MAX_JSON_BODY = 1 << 20


def json_body() -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        BadRequest: not JSON, or not an object. PayloadTooLarge: over 1 MiB.
    """
    if (request.content_length or 0) > MAX_JSON_BODY:
        raise PayloadTooLarge(f"a JSON body may have at most {MAX_JSON_BODY} bytes")
    raw = request.get_data(cache=False)
    if len(raw) > MAX_JSON_BODY:
        raise PayloadTooLarge(f"a JSON body may have at most {MAX_JSON_BODY} bytes")
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None,
          *, required: bool = False) -> Any:
    """`body[name]`, checked to be of `kind` (bool is not accepted as int).

    Raises:
        BadRequest: missing although required, or of the wrong type.
    """
    if name not in body or body[name] is None:
        if required:
            raise BadRequest(f"field {name!r} is required")
        return default
    value = body[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise BadRequest(f"field {name!r} must be of type {names}")
    return value


def int_arg(name: str, default: int, *, maximum: int | None = None) -> int:
    """An integer query parameter.

    Raises:
        BadRequest: not an integer.
    """
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, not {raw!r}") from None
    return min(value, maximum) if maximum is not None else value


def public_url() -> str:
    """The registry's base URL as clients see it (no trailing slash)."""
    return (current_app.config["PUBLIC_URL"] or request.host_url).rstrip("/")


def iso(moment: datetime | None) -> str | None:
    """`2025-01-20T10:15:32.000Z`, the Hub's timestamp format."""
    if moment is None:
        return None
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
