"""Signing in and out, setting a password with an API token, and the settings page: API
tokens (a new one is shown once) and signing public keys."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from flask import flash, redirect, render_template, request, url_for

from registry_server.db import db
from registry_server.errors import ApiError, BadRequest
from registry_server.models import User
from registry_server.services import accounts
from registry_server.ui import passwords, signin
from registry_server.ui.blueprint import bp


def _safe_next(target: str | None) -> str:
    """Only a path on this site: an open redirect would let a phishing link borrow our name."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("ui.home")


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
    found = passwords.check_password(db.session, name, request.form.get("password", ""))
    if found is None:
        return render_template("ui/login.html", next=target, name=name,
                               error="Wrong name or password."), 400
    signin.sign_in(*found)
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
        fingerprint = _new_password(token.user)
    except BadRequest as e:
        return render_template("ui/set_password.html", name=name, error=str(e)), 400
    signin.sign_in(token.user, fingerprint)
    flash("Your password is set; you are signed in.")
    return redirect(url_for("ui.settings"))


def _new_password(user: User) -> str:
    """Raises: BadRequest: the two entries differ, or the password is too short or long."""
    if request.form.get("password", "") != request.form.get("password2", ""):
        raise BadRequest("The two passwords differ.")
    return passwords.set_password(db.session, user, request.form["password"])


def _settings(status: int = 200, **extra):
    user = signin.viewer()
    response = render_template(
        "ui/settings.html", tokens=accounts.list_tokens(db.session, user),
        keys=accounts.list_public_keys(db.session, user), scopes=accounts.SCOPES,
        orgs=accounts.user_orgs(db.session, user), **extra)
    # Token secrets must not linger in a cache or the back/forward history.
    return response, status, {"Cache-Control": "no-store"}


@bp.get("/settings")
@login_required
def settings():
    return _settings()


@bp.post("/settings/tokens")
@login_required
def create_token():
    form = request.form
    try:
        token, secret = accounts.create_token(db.session, signin.viewer(),
                                              name=form.get("name", "").strip(),
                                              scope=form.get("scope", "read"))
    except ApiError as e:
        return _settings(e.status, token_error=str(e))
    # Shown in this answer only (not stored in the session cookie, not redirected to).
    return _settings(201, new_token=token, new_secret=secret)


@bp.post("/settings/tokens/<int:token_id>/revoke")
@login_required
def revoke_token(token_id: int):
    token = accounts.revoke_token(db.session, signin.viewer(), token_id)
    flash(f"Token {token.name!r} is revoked.")
    return redirect(url_for("ui.settings") + "#tokens")


@bp.post("/settings/keys")
@login_required
def add_key():
    form = request.form
    try:
        key = accounts.add_public_key(db.session, signin.viewer(), form.get("pem", "").strip(),
                                      name=form.get("name", "").strip())
    except ApiError as e:
        return _settings(e.status, key_error=str(e), key_hint=e.hint,
                         key_form={"name": form.get("name", ""), "pem": form.get("pem", "")})
    flash(f"Key {key.key_id} is registered.")
    return redirect(url_for("ui.settings") + "#keys")


@bp.post("/settings/keys/delete")
@login_required
def delete_key():
    key_id = request.form.get("key_id", "")
    accounts.delete_public_key(db.session, signin.viewer(), key_id)
    flash(f"Key {key_id} is removed.")
    return redirect(url_for("ui.settings") + "#keys")


@bp.post("/settings/password")
@login_required
def change_password():
    user = signin.viewer()
    if passwords.check_password(db.session, user.name, request.form.get("current", "")) is None:
        return _settings(400, password_error="The current password is wrong.")
    try:
        signin.refresh_fingerprint(_new_password(user))
    except BadRequest as e:
        return _settings(400, password_error=str(e))
    flash("Your password is changed; other browsers are signed out.")
    return redirect(url_for("ui.settings"))
