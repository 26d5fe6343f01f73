"""HubErrors as one line plus a hint: the click group both `hub` and `hub-registry` use.

Lives outside `hubcli.cli` so the registry's command line can share it without importing the
client's commands (an import-linter contract forbids registry_server -> hubcli.cli).
"""

from __future__ import annotations

import os
import sys

import click

from hubcli.errors import HubError


class ReportingGroup(click.Group):
    """A command group that turns HubErrors into one line plus a hint (exit 1)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HubError as e:
            report(e)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


def report(e: HubError) -> None:
    """Print one line for the error and one for its hint; the traceback only with HUB_DEBUG=1."""
    if os.environ.get("HUB_DEBUG") == "1":
        import traceback

        traceback.print_exception(e, file=sys.stderr)
    click.secho(f"error: {e}", fg="red", err=True)
    if e.hint:
        click.echo(f"hint: {e.hint}", err=True)
    if os.environ.get("HUB_DEBUG") != "1":
        click.echo("(set HUB_DEBUG=1 for the full traceback)", err=True)
