"""Who is browsing: the user of the server-side session named by Flask's signed cookie
(HttpOnly, SameSite=Lax, Secure over https). API clients are unaffected: they authenticate
with bearer tokens, and the cookie never authenticates an API call.

The cookie carries a random session id whose SHA-256 is a row of `ui_sessions`. A signed
cookie alone cannot be withdrawn, so sign-out deletes the row (a copy of the cookie taken
before then opens nothing), and a password change deletes all of the user's rows.
"""

from __future__ import annotations

import hashlib
import secrets

from flask import Flask, current_app, g, request, session
from flask.sessions import SecureCookieSessionInterface
from sqlalchemy import delete

from registry_server.db import db
from registry_server.models import User, as_utc, utcnow
from registry_server.ui.models import BrowserSession

_SESSION = "sid"


class UiSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, marked Secure whenever the registry is reached by https
    (the request's scheme, or a PUBLIC_URL that says https)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"] or request.is_secure
                    or app.config.get("PUBLIC_URL", "").startswith("https://"))


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def load_viewer() -> None:
    """Put the signed-in user (or None) in `g`; a cookie whose session has ended (signed out,
    password changed, older than the cookie lifetime) is cleared."""
    session_id, user = session.get(_SESSION), None
    if isinstance(session_id, str):
        row = db.session.get(BrowserSession, _hash(session_id))
        lifetime = current_app.permanent_session_lifetime
        if row is not None and utcnow() - as_utc(row.created_at) < lifetime:
            user = db.session.get(User, row.user_id)
        if user is None:
            session.clear()
    g.ui_viewer = user


def viewer() -> User | None:
    return g.get("ui_viewer")


def sign_in(user: User) -> None:
    """Open a server-side session for `user` and name it in this browser's cookie."""
    _end_this_session()
    stale = utcnow() - current_app.permanent_session_lifetime
    db.session.execute(delete(BrowserSession).where(BrowserSession.user_id == user.id,
                                                    BrowserSession.created_at < stale))
    # A fresh cookie (so a new CSRF token) on sign-in: nothing planted before carries over.
    session.clear()
    session_id = secrets.token_urlsafe(32)
    db.session.add(BrowserSession(id_hash=_hash(session_id), user_id=user.id))
    db.session.commit()
    session[_SESSION] = session_id
    session.permanent = True
    g.ui_viewer = user


def sign_out() -> None:
    """End this browser's session, on the server as well as in its cookie."""
    _end_this_session()
    session.clear()
    g.ui_viewer = None


def _end_this_session() -> None:
    session_id = session.get(_SESSION)
    if isinstance(session_id, str):
        db.session.execute(delete(BrowserSession)
                           .where(BrowserSession.id_hash == _hash(session_id)))
        db.session.commit()
