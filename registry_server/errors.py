"""Errors the service layer raises, and how they become HTTP answers.

All are `hubcli.errors.HubError`s (the project's one hierarchy); each has an HTTP status and,
for the Hugging Face client, an `X-Error-Code`. Every error answer is JSON
`{"error": message, "hint"?: ..., "code"?: ...}` with the message repeated in
`X-Error-Message` (which `huggingface_hub` shows to its user).
"""

from __future__ import annotations

import errno
import logging
import re

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from hubcli.errors import AuthError, ConflictError, HubError, NotFoundError, RegistryError
from hubcli.format import error_codes as codes

log = logging.getLogger(__name__)


class ApiError(RegistryError):
    """Base of the registry's own errors: `status` and `code` travel to the client."""

    status = 400
    code: str | None = None

    def __init__(self, message: str, *, hint: str | None = None, repo_id: str | None = None,
                 revision: str | None = None, headers: dict[str, str] | None = None,
                 status: int | None = None) -> None:
        super().__init__(message, hint=hint, repo_id=repo_id, revision=revision,
                         status=status or self.status)
        # Extra response headers, e.g. X-Repo-Commit on an EntryNotFound.
        self.headers = headers or {}


class BadRequest(ApiError):
    """Malformed input: bad JSON, bad names, wrong field types."""

    code = codes.BAD_REQUEST


class PayloadTooLarge(ApiError):
    status = 413
    code = codes.PAYLOAD_TOO_LARGE


class Unauthorized(ApiError, AuthError):
    """No token, or a token that is unknown or revoked."""

    status = 401
    code = codes.UNAUTHORIZED


class Forbidden(ApiError, AuthError):
    """Authenticated, but not allowed (read-only token, not a member)."""

    status = 403
    code = codes.FORBIDDEN


class RepoNotFound(ApiError, NotFoundError):
    status = 404
    code = codes.REPO_NOT_FOUND


class RevisionNotFound(ApiError, NotFoundError):
    status = 404
    code = codes.REVISION_NOT_FOUND


class EntryNotFound(ApiError, NotFoundError):
    status = 404
    code = codes.ENTRY_NOT_FOUND


class NotFound(ApiError, NotFoundError):
    """Something other than a repo, revision or file: a user, a key, a token."""

    status = 404
    code = codes.NOT_FOUND


class Unsupported(ApiError):
    """A Hub feature this registry does not have: refused, so a client never believes it
    happened."""

    status = 400
    code = codes.UNSUPPORTED


class Conflict(ApiError, ConflictError):
    status = 409
    code = codes.CONFLICT


class KeyProofRejected(ApiError, AuthError):
    """A public key registered without proof of holding its private half: no challenge, or
    one that is unknown, used, expired or another user's, or a signature that does not verify."""

    status = 403
    code = codes.KEY_PROOF_REJECTED


class Rejected(ApiError):
    """An upload that is not a valid bundle (files, manifest, digests, weights header), or
    that names another adapter."""

    status = 422
    code = codes.INVALID_BUNDLE


class SignatureRejected(Rejected):
    """An upload not signed by a key registered to the pushing account."""

    code = codes.INVALID_SIGNATURE


def error_response(message: str, status: int, *, code: str | None = None,
                   hint: str | None = None, headers: dict[str, str] | None = None,
                   extra: dict | None = None) -> Response:
    body = {"error": message, **(extra or {})}
    if hint:
        body["hint"] = hint
    if code:
        body["code"] = code
    response = jsonify(body)
    response.status_code = status
    if code:
        response.headers["X-Error-Code"] = code
    response.headers["X-Error-Message"] = header_safe(message)
    response.headers.update(headers or {})
    return response


# Anything but printable ASCII: servers refuse control characters in a header (gunicorn
# answers an HTML 500), and clients decode non-ASCII bytes differently.
_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def header_safe(text: str) -> str:
    """One line of printable ASCII, at most 1000 characters; anything else is written as a
    backslash escape (`\\x01`, `\\xe9`)."""
    flat = " ".join(text.split())
    return _escape(flat)[:1000]


def _escape(text: str) -> str:
    return _NOT_PRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _safe_headers(response: Response) -> Response:
    """Escape every header value that is not printable ASCII: one place for all of them
    (error messages, warnings, names echoed from the URL)."""
    for name, value in list(response.headers.items()):
        if _NOT_PRINTABLE.search(value):
            response.headers[name] = _escape(value)
    return response


def _hub_error(e: HubError) -> Response:
    if isinstance(e, ApiError):
        return error_response(str(e), e.status or 400, code=e.code, hint=e.hint, headers=e.headers)
    log.exception("unexpected HubError on %s %s", request.method, request.path)
    return error_response(str(e), 500, hint=e.hint)


def _http_error(e: HTTPException) -> Response:
    code = {404: codes.NOT_FOUND, 405: codes.METHOD_NOT_ALLOWED, 413: codes.PAYLOAD_TOO_LARGE,
            416: codes.RANGE_NOT_SATISFIABLE}.get(e.code or 500)
    response = error_response(e.description or e.name, e.code or 500, code=code)
    for name in ("Content-Range", "Allow"):
        if e.get_response().headers.get(name):
            response.headers[name] = e.get_response().headers[name]
    return response


def _os_error(e: OSError) -> Response:
    """A full or read-only disk is the operator's to fix, not a bug: say so, with a status a
    client may retry on. Every write is atomic, so nothing half-written stays visible, and the
    next request works again once there is room."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        log.error("storage full on %s %s: %s", request.method, request.path, e)
        return error_response("the registry's storage is full; nothing was changed", 507,
                              code=codes.INSUFFICIENT_STORAGE,
                              hint="try again later; the registry's operator must free space")
    if e.errno == errno.EROFS:
        log.error("storage read-only on %s %s: %s", request.method, request.path, e)
        return error_response("the registry's storage is read-only; nothing was changed", 503,
                              code=codes.STORAGE_UNAVAILABLE,
                              hint="try again later; the registry's operator must make it "
                                   "writable")
    return _unexpected(e)


def _unexpected(e: Exception) -> Response:
    # Logged with the path only: request headers (and so tokens) never reach the log.
    log.exception("internal error on %s %s", request.method, request.path)
    return error_response("internal server error", 500, code=codes.INTERNAL_ERROR)


def init_app(app: Flask) -> None:
    app.register_error_handler(HubError, _hub_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(OSError, _os_error)
    app.register_error_handler(Exception, _unexpected)
    app.after_request(_safe_headers)
