"""Who is browsing: the user named by Flask's signed session cookie (HttpOnly, SameSite=Lax,
Secure over https). API clients are unaffected: they authenticate with bearer tokens, and the
cookie never authenticates an API call.
"""

from __future__ import annotations

from flask import Flask, g, request, session
from flask.sessions import SecureCookieSessionInterface

from registry_server.db import db
from registry_server.models import User
from registry_server.ui.passwords import session_user

_USER, _FINGERPRINT = "uid", "pwv"


class UiSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, marked Secure whenever the registry is reached by https
    (the request's scheme, or a PUBLIC_URL that says https)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"] or request.is_secure
                    or app.config.get("PUBLIC_URL", "").startswith("https://"))


def load_viewer() -> None:
    """Put the signed-in user (or None) in `g`; a session whose user is gone or whose password
    has changed since sign-in is cleared."""
    user_id, fingerprint = session.get(_USER), session.get(_FINGERPRINT)
    user = None
    if isinstance(user_id, int) and isinstance(fingerprint, str):
        user = session_user(db.session, user_id, fingerprint)
        if user is None:
            session.clear()
    g.ui_viewer = user


def viewer() -> User | None:
    return g.get("ui_viewer")


def sign_in(user: User, fingerprint: str) -> None:
    # A fresh session (so a new CSRF token) on sign-in: nothing planted before carries over.
    session.clear()
    session[_USER], session[_FINGERPRINT] = user.id, fingerprint
    session.permanent = True
    g.ui_viewer = user


def refresh_fingerprint(fingerprint: str) -> None:
    """Keep this session signed in after its own user changed the password."""
    session[_FINGERPRINT] = fingerprint


def sign_out() -> None:
    session.clear()
    g.ui_viewer = None
