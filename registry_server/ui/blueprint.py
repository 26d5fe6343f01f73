"""The web UI's blueprint: every browser page. Before each request it loads the signed-in
user and checks the CSRF token of form posts; after it, it adds security headers."""

from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, Response, request

from registry_server.ui import csrf, errors, signin

bp = Blueprint("ui", __name__)
errors.register(bp)

# Styles and scripts come from this app only; inline SVG charts use classes, not style
# attributes. Card images may come from https sites (the card author's choice).
CSP = ("default-src 'self'; img-src 'self' https: data:; style-src 'self'; script-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


@bp.before_request
def _before() -> None:
    signin.load_viewer()
    csrf.protect()


@bp.after_request
def _headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


@bp.context_processor
def _template_globals() -> dict:
    return {"viewer": signin.viewer(), "csrf_token": csrf.token}


def url_with(**changes: object) -> str:
    """This page's URL with some query parameters replaced; None or [] removes one, a list
    gives it several values (`?tag=a&tag=b`)."""
    args = request.args.copy()
    for key, value in changes.items():
        args.poplist(key)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item not in (None, ""):
                args.add(key, str(item))
    query = urlencode(list(args.items(multi=True)))
    return request.path + ("?" + query if query else "")
