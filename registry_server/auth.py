"""Who is calling: the bearer token of the current request.

`Authorization: Bearer <token>` (what huggingface_hub sends). A token that is unknown or
revoked is refused with 401 even on public reads, as the Hub does, so a client learns early
that its token is bad. The token itself is never logged or echoed.
"""

from __future__ import annotations

from flask import g, request

from registry_server.db import db
from registry_server.errors import Forbidden, Unauthorized
from registry_server.models import Token, User
from registry_server.services.accounts import authenticate

LOGIN_HINT = "create a token with `hub-registry create-token NAME` and log in with `hub login`"


def current_token() -> Token | None:
    """The request's token, or None when it carries none.

    Raises:
        Unauthorized: a token that is malformed, unknown or revoked.
    """
    if "auth_token" not in g:
        g.auth_token = _from_header(request.headers.get("Authorization", ""))
    return g.auth_token


def _from_header(header: str) -> Token | None:
    if not header:
        return None
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'", hint=LOGIN_HINT)
    token = authenticate(db.session, secret.strip())
    if token is None:
        raise Unauthorized("invalid or revoked token", hint=LOGIN_HINT)
    return token


def current_user() -> User | None:
    token = current_token()
    return token.user if token is not None else None


def require_token(*, write: bool = False) -> Token:
    """The request's token.

    Raises:
        Unauthorized: no token. Forbidden: `write` and the token has read scope only.
    """
    token = current_token()
    if token is None:
        raise Unauthorized("this needs a token", hint=LOGIN_HINT)
    if write and token.scope != "write":
        raise Forbidden(f"token {token.name!r} has read scope; this needs write scope",
                        hint="create a token with scope write")
    return token


def require_user(*, write: bool = False) -> User:
    """The calling user; raises as `require_token`."""
    return require_token(write=write).user
