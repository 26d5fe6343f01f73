"""HTML error pages for the UI's routes. The app-wide handlers (registry_server.errors) keep
answering JSON everywhere else: these are registered on the UI blueprint only."""

from __future__ import annotations

import logging

from flask import Blueprint, render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from hubcli.errors import HubError
from registry_server.errors import ApiError

log = logging.getLogger(__name__)


def page(status: int, message: str, hint: str | None = None):
    """The error page (a response tuple) for `status`."""
    title = HTTP_STATUS_CODES.get(status, "Error")
    return render_template("ui/error.html", status=status, title=title, message=message,
                           hint=hint), status


def _hub_error(e: HubError):
    if isinstance(e, ApiError):
        return page(e.status or 400, str(e), e.hint)
    log.exception("unexpected HubError on %s %s", request.method, request.path)
    return page(500, str(e), e.hint)


def _http_error(e: HTTPException):
    return page(e.code or 500, e.description or e.name)


def _unexpected(e: Exception):
    log.exception("internal error on %s %s", request.method, request.path)
    return page(500, "Something went wrong on our side; please try again later.")


def register(bp: Blueprint) -> None:
    bp.register_error_handler(HubError, _hub_error)
    bp.register_error_handler(HTTPException, _http_error)
    bp.register_error_handler(Exception, _unexpected)
