"""Small request/response helpers shared by the blueprints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import current_app, request
from werkzeug.routing import IntegerConverter

from hubcli.format import safejson
from hubcli.format.safejson import NUL, nul_field

from registry_server.errors import BadRequest, PayloadTooLarge
from registry_server.models import as_utc

MAX_JSON_BODY = 1 << 20
# Row ids are 32-bit on PostgreSQL; a larger number in a URL or query names nothing.
MAX_ID = 2**31 - 1
MAX_PAGE = 1_000_000


class IdConverter(IntegerConverter):
    """Flask's `int` converter, bounded to what a database id can hold: a larger number is a
    404 like any unknown id, not an overflow in the database."""

    def __init__(self, map, *args, **kwargs) -> None:
        kwargs.setdefault("max", MAX_ID)
        super().__init__(map, *args, **kwargs)


def refuse_nul() -> None:
    """Refuse a NUL character in the path, the query or a form field (before any handler:
    anonymous requests too), the same way on SQLite and PostgreSQL.

    Raises:
        BadRequest: names where the NUL is.
    """
    if NUL in request.path:
        raise BadRequest("the URL path contains a NUL character")
    for key, value in request.args.items(multi=True):
        if NUL in key or NUL in value:
            raise BadRequest(f"query parameter {key!r} contains a NUL character")
    if request.mimetype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        for key, value in request.form.items(multi=True):
            if NUL in key or NUL in value:
                raise BadRequest(f"form field {key!r} contains a NUL character")


def json_body() -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        BadRequest: not JSON, nested too deeply, not an object, or a NUL character in a
            field. PayloadTooLarge: over 1 MiB.
    """
    if (request.content_length or 0) > MAX_JSON_BODY:
        raise PayloadTooLarge(f"a JSON body may have at most {MAX_JSON_BODY} bytes")
    raw = request.get_data(cache=False)
    if len(raw) > MAX_JSON_BODY:
        raise PayloadTooLarge(f"a JSON body may have at most {MAX_JSON_BODY} bytes")
    try:
        body = safejson.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    bad = nul_field(body, "")
    if bad is not None:
        raise BadRequest(f"field {bad!r} contains a NUL character")
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


def int_arg(name: str, default: int, *, minimum: int = 1, maximum: int = MAX_ID) -> int:
    """An integer query parameter in [minimum, maximum].

    Raises:
        BadRequest: not an integer, or out of range (the message names both bounds).
    """
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, not {raw!r}") from None
    if not minimum <= value <= maximum:
        raise BadRequest(f"query parameter {name!r} must be from {minimum} to {maximum}, "
                         f"not {value}")
    return value


def public_url() -> str:
    """The registry's base URL as clients see it (no trailing slash)."""
    return (current_app.config["PUBLIC_URL"] or request.host_url).rstrip("/")


def iso(moment: datetime | None) -> str | None:
    """`2025-01-20T10:15:32.000Z`, the Hub's timestamp format."""
    if moment is None:
        return None
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
