"""Signing in and out, setting a password with an API token, and the settings page: API
tokens (a new one is shown once, after a redirect) and signing public keys (listed and removed here; added with
`hub keys upload`, which proves holding the private key, something a web form cannot do)."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from flask import current_app, flash, redirect, render_template, request, session, url_for

from registry_server.db import db
from registry_server.errors import ApiError, BadRequest
from registry_server.models import Token, User
from registry_server.services import accounts
from registry_server.ui import passwords, signin, throttle
from registry_server.ui.blueprint import bp

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BLANKS = "".join(map(chr, range(0x21)))  # C0 controls and space
_NEW_TOKEN = "new_token"  # session key: the token just created, for the page redirected to


def _safe_next(target: str | None) -> str:
    """Only a path on this site: an open redirect would let a phishing link borrow our name.

    Normalised the way browsers read a URL first (they drop tabs and newlines anywhere and
    strip leading and trailing control characters and spaces, so `/<tab>/evil.example` is
    `//evil.example` to them), then anything that is not a plain absolute path — a scheme, a
    host, a `//` or `\\` prefix, a backslash or a control character left — becomes the home page.
    """
    cleaned = re.sub(r"[\t\n\r]", "", target or "").strip(_BLANKS)
    parts = urlsplit(cleaned)
    if (not cleaned.startswith("/") or cleaned.startswith("//") or "\\" in cleaned
            or parts.scheme or parts.netloc or _CONTROL.search(cleaned)):
        return url_for("ui.home")
    return cleaned


def login_required(view: Callable) -> Callable:
    """Send anonymous visitors to the sign-in page, and back here afterwards."""
    @wraps(view)
    def wrapper(*args, **kwargs):
        if signin.viewer() is None:
            return redirect(url_for("ui.login", next=request.full_path.rstrip("?")))
        return view(*args, **kwargs)
    return wrapper


@bp.route("/login", methods=["GET", "POST"])
def login():
    target = _safe_next(request.values.get("next"))
    if request.method == "GET":
        return render_template("ui/login.html", next=target)
    name = request.form.get("name", "").strip()
    config = current_app.config
    window = timedelta(seconds=config["LOGIN_FAILURE_WINDOW"])
    tries = throttle.source(name, request.remote_addr)
    wait = throttle.retry_after(db.session, tries, config["LOGIN_MAX_FAILURES"], window)
    if wait is not None:
        return (render_template("ui/login.html", next=target, name=name,
                                error=f"Too many wrong passwords; try again in {wait} s."),
                429, {"Retry-After": str(wait)})
    user = passwords.check_password(db.session, name, request.form.get("password", ""))
    if user is None:
        throttle.record_failure(db.session, tries, window)
        return render_template("ui/login.html", next=target, name=name,
                               error="Wrong name or password."), 400
    throttle.forget(db.session, tries)
    signin.sign_in(user)
    return redirect(target)


@bp.route("/logout", methods=["GET", "POST"])
def logout():
    if request.method == "GET":
        return render_template("ui/logout.html")
    signin.sign_out()
    flash("You are signed out.")
    return redirect(url_for("ui.home"))


@bp.route("/login/password", methods=["GET", "POST"])
def password_with_token():
    """First sign-in (or a forgotten password): prove who you are with a write API token."""
    if request.method == "GET":
        return render_template("ui/set_password.html")
    form = request.form
    token = accounts.authenticate(db.session, form.get("token", "").strip())
    name = form.get("name", "").strip()
    if token is None or token.user.name != name or token.scope != "write":
        return render_template("ui/set_password.html", name=name,
                               error="That is not a write token of this user."), 400
    try:
        _new_password(token.user)
    except BadRequest as e:
        return render_template("ui/set_password.html", name=name, error=str(e)), 400
    signin.sign_in(token.user)
    flash("Your password is set; you are signed in.")
    return redirect(url_for("ui.settings"))


def _new_password(user: User) -> None:
    """Set the form's new password, which ends every session of `user` (this one too).

    Raises:
        BadRequest: the two entries differ, or the password is too short or long.
    """
    if request.form.get("password", "") != request.form.get("password2", ""):
        raise BadRequest("The two passwords differ.")
    passwords.set_password(db.session, user, request.form["password"])


def _settings(status: int = 200, **extra):
    user = signin.viewer()
    tokens = accounts.list_tokens(db.session, user)
    response = render_template(
        "ui/settings.html", tokens=[t for t in tokens if t.revoked_at is None],
        revoked=[t for t in tokens if t.revoked_at is not None],
        keys=accounts.list_public_keys(db.session, user), scopes=accounts.SCOPES,
        orgs=accounts.user_orgs(db.session, user), **extra)
    # Token secrets must not linger in a cache or the back/forward history.
    return response, status, {"Cache-Control": "no-store"}


def _sealer() -> Fernet:
    """Encrypts a new token's secret for its one trip in the session cookie (signed, but
    readable by whoever holds the cookie file): the key derives from the app's secret key."""
    secret = current_app.secret_key
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"ui new token\0" + raw).digest()))


def _take_new_token() -> dict:
    """The token created by the request that redirected here, once: reloading the page shows
    (and creates) nothing."""
    sealed = session.pop(_NEW_TOKEN, None)
    if not isinstance(sealed, dict):
        return {}
    token = db.session.get(Token, sealed.get("id"))
    try:
        secret = _sealer().decrypt(str(sealed.get("secret")).encode()).decode()
    except InvalidToken:
        return {}
    if token is None or token.user_id != signin.viewer().id or token.revoked_at is not None:
        return {}
    return {"new_token": token, "new_secret": secret}


@bp.get("/settings")
@login_required
def settings():
    return _settings(**_take_new_token())


@bp.post("/settings/tokens")
@login_required
def create_token():
    """Post-redirect-get: the new secret rides (encrypted) in the session to the settings
    page, which shows it once; a reload of that page posts nothing."""
    form = request.form
    try:
        token, secret = accounts.create_token(db.session, signin.viewer(),
                                              name=form.get("name", "").strip(),
                                              scope=form.get("scope", "read"))
    except ApiError as e:
        return _settings(e.status, token_error=str(e), token_name=form.get("name", ""))
    session[_NEW_TOKEN] = {"id": token.id, "secret": _sealer().encrypt(secret.encode()).decode()}
    return redirect(url_for("ui.settings") + "#tokens", 303)


@bp.post("/settings/tokens/<int:token_id>/revoke")
@login_required
def revoke_token(token_id: int):
    token = accounts.revoke_token(db.session, signin.viewer(), token_id)
    flash(f"Token {token.name!r} is revoked.")
    return redirect(url_for("ui.settings") + "#tokens", 303)


@bp.post("/settings/keys/delete")
@login_required
def delete_key():
    key_id = request.form.get("key_id", "")
    accounts.delete_public_key(db.session, signin.viewer(), key_id)
    flash(f"Key {key_id} is removed.")
    return redirect(url_for("ui.settings") + "#keys", 303)


@bp.post("/settings/password")
@login_required
def change_password():
    user = signin.viewer()
    if passwords.check_password(db.session, user.name, request.form.get("current", "")) is None:
        return _settings(400, password_error="The current password is wrong.")
    try:
        _new_password(user)
    except BadRequest as e:
        return _settings(400, password_error=str(e))
    signin.sign_in(user)  # a new session for this browser only
    flash("Your password is changed; other browsers are signed out.")
    return redirect(url_for("ui.settings"))
