"""`flask --app registry_server set-password NAME`: set a user's web sign-in password from the
server's shell (users can also set it themselves at /login/password with a write token)."""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from hubcli.cli.main import report
from hubcli.errors import HubError
from registry_server.db import db
from registry_server.services import accounts
from registry_server.ui import passwords


@click.command("set-password")
@click.argument("name")
@click.password_option(help="The new password (prompted, hidden, asked twice if omitted).")
@with_appcontext
def set_password(name: str, password: str) -> None:
    """Set the web sign-in password of user NAME."""
    try:
        with db.session_scope() as session:
            passwords.set_password(session, accounts.get_user(session, name), password)
    except HubError as e:
        # Flask's command group, unlike `hub`'s and `hub-registry`'s, does not report these.
        report(e)
        raise SystemExit(1) from None
    click.echo(f"password set for {name}")
