"""`hub-registry`: run and administer the registry.

    hub-registry serve                        # embedded default: SQLite + local disk
    hub-registry create-user alice --admin    # prints a token once
    hub-registry set-password alice           # for signing in to the web UI
    hub-registry create-org acme --member alice
    gunicorn -w 4 'registry_server:create_app()'   # at scale, after `hub-registry migrate`
    hub-registry backup registry.tar           # database + blobs, one consistent snapshot
    hub-registry restore registry.tar          # into an empty, migrated deployment

Settings come from the instance folder ($HUB_REGISTRY_INSTANCE_PATH) and HUB_REGISTRY_*
variables (see registry_server/config.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from flask import Flask

from hubcli.reporting import ReportingGroup
from registry_server import create_app
from registry_server.backup.archive import Summary
from registry_server.db import db
from registry_server.services import accounts, maintenance


def _app() -> Flask:
    return create_app()


@click.group(cls=ReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Run and administer the adapter registry."""


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def serve(host: str, port: int) -> None:
    """Serve the registry (threaded; use gunicorn for several processes)."""
    from werkzeug.serving import run_simple

    app = _app()
    click.echo(f"registry on http://{host}:{port}  (instance {app.instance_path}, "
               f"storage {app.config['STORAGE']})")
    run_simple(host, port, app, threaded=True)


@cli.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    from registry_server import migrate as migrations

    app = create_app({"AUTO_MIGRATE": False})
    migrations.upgrade(db.engine(app))
    click.echo("database is up to date")


@cli.command("create-user")
@click.argument("name")
@click.option("--admin", is_flag=True, help="Make the user an administrator.")
def create_user(name: str, admin: bool) -> None:
    """Create a user and print a write token for them (shown once)."""
    with _app().app_context(), db.session_scope() as session:
        user = accounts.create_user(session, name, admin=admin)
        _, secret = accounts.create_token(session, user, name="initial", scope="write")
    click.echo(f"created user {name}; token (shown once): {secret}")


@cli.command("set-password")
@click.argument("name")
@click.password_option(help="The new password (prompted, hidden, asked twice if omitted).")
def set_password(name: str, password: str) -> None:
    """Set the web sign-in password of user NAME (users can also set it at /login/password
    with a write token)."""
    from registry_server.ui import passwords

    with _app().app_context(), db.session_scope() as session:
        passwords.set_password(session, accounts.get_user(session, name), password)
    click.echo(f"password set for {name}")


@cli.command("create-org")
@click.argument("name")
@click.option("--member", "members", multiple=True, help="A member's user name (repeatable).")
def create_org(name: str, members: tuple[str, ...]) -> None:
    """Create an organisation; its members may push to it."""
    with _app().app_context(), db.session_scope() as session:
        accounts.create_org(session, name, members=list(members))
    click.echo(f"created organisation {name}" + (f" with {', '.join(members)}" if members else ""))


@cli.command("add-member")
@click.argument("org")
@click.argument("user")
def add_member(org: str, user: str) -> None:
    """Add a user to an organisation."""
    with _app().app_context(), db.session_scope() as session:
        accounts.add_member(session, org, user)
    click.echo(f"{user} is a member of {org}")


@cli.command("create-token")
@click.argument("user")
@click.option("--name", help="Unique among the user's live tokens.  [default: token, token-2, ...]")
@click.option("--scope", type=click.Choice(accounts.SCOPES), default="write", show_default=True)
def create_token(user: str, name: str, scope: str) -> None:
    """Create an API token for a user and print it (shown once)."""
    with _app().app_context(), db.session_scope() as session:
        token, secret = accounts.create_token(session, accounts.get_user(session, user),
                                              name=name, scope=scope)
        token_id = token.id
    click.echo(f"token {token_id} ({scope}) for {user} (shown once): {secret}")


@cli.command("revoke-token")
@click.argument("user")
@click.argument("token_id", type=int)
def revoke_token(user: str, token_id: int) -> None:
    """Revoke one of a user's tokens."""
    with _app().app_context(), db.session_scope() as session:
        accounts.revoke_token(session, accounts.get_user(session, user), token_id)
    click.echo(f"revoked token {token_id}")


@cli.command("add-key")
@click.argument("user")
@click.argument("pem_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", default="", help="A label for the key.")
def add_key(user: str, pem_file: Path, name: str) -> None:
    """Register a signing public key (PEM) to a user. The operator vouches for it: users
    register their own with `hub keys upload`, which proves holding the private key."""
    with _app().app_context(), db.session_scope() as session:
        key = accounts.add_public_key(session, accounts.get_user(session, user),
                                      pem_file.read_text(), name=name)
        kid = key.key_id
    click.echo(f"registered {kid} for {user}")


@cli.command()
@click.option("--grace-hours", default=24, show_default=True, type=float,
              help="Keep unreferenced blobs younger than this (uploads in progress).")
@click.option("--dry-run", is_flag=True)
def gc(grace_hours: float, dry_run: bool) -> None:
    """Delete stored blobs that no version references (left by refused or abandoned pushes).

    Stale staging files of pushes that died are removed too, as on every start of the app."""
    from registry_server.blobhttp import get_storage

    app = _app()
    with app.app_context(), db.session_scope() as session:
        removed = maintenance.collect_garbage(session, get_storage(app),
                                              grace_hours=grace_hours, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(removed)} unreferenced blobs")


@cli.command()
@click.argument("archive", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def backup(archive: Path, as_json: bool) -> None:
    """Write the database and every blob it names to the tar file ARCHIVE, as one consistent
    snapshot (safe while the registry serves). Progress goes to stderr."""
    from registry_server.backup import create
    from registry_server.blobhttp import get_storage

    app = _app()
    summary = create.write_backup(db.engine(app), get_storage(app), archive, progress=_progress)
    _print_summary(summary, as_json, "backed up")


@cli.command()
@click.argument("archive", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace what the deployment holds.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def restore(archive: Path, force: bool, as_json: bool) -> None:
    """Put a backup into this deployment, which must be migrated and empty (stop the server
    first). Every blob is checked against its digest before any row is written."""
    from registry_server.backup import restore as restoring
    from registry_server.blobhttp import get_storage

    app = _app()
    summary = restoring.restore(db.engine(app), get_storage(app), archive, force=force,
                                progress=_progress)
    _print_summary(summary, as_json, "restored")


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _print_summary(summary: Summary, as_json: bool, verb: str) -> None:
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
        return
    click.echo(f"{verb} {sum(summary.tables.values())} rows and {summary.blobs} blobs "
               f"({summary.blob_bytes} bytes) at schema revision {summary.revision}: "
               f"{summary.archive}")


def main() -> None:
    cli(prog_name="hub-registry")
