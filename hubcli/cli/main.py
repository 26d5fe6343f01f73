"""Entry point of `hub`: the command group, and the one place errors become user messages."""

from __future__ import annotations

import importlib
import os
import sys

import click

from hubcli import __version__
from hubcli.errors import HubError

# Command modules are imported lazily so `hub --help` and fast commands never pay for torch.
# Each entry: command name -> "module:attribute".
COMMANDS: dict[str, str] = {
    "keygen": "hubcli.cli.signing_cmds:keygen",
    "bundle": "hubcli.cli.signing_cmds:bundle",
    "sign": "hubcli.cli.signing_cmds:sign",
    "verify": "hubcli.cli.signing_cmds:verify",
    "trust": "hubcli.cli.signing_cmds:trust",
    "train": "hubcli.cli.model_cmds:train_cmd",
    "eval": "hubcli.cli.model_cmds:eval_cmd",
    "predict": "hubcli.cli.model_cmds:predict_cmd",
    "login": "hubcli.cli.registry_cmds:login",
    "logout": "hubcli.cli.registry_cmds:logout",
    "whoami": "hubcli.cli.registry_cmds:whoami",
    "keys": "hubcli.cli.registry_cmds:keys",
    "push": "hubcli.cli.registry_cmds:push",
    "pull": "hubcli.cli.registry_cmds:pull",
    "search": "hubcli.cli.registry_cmds:search",
    "quickstart": "hubcli.cli.registry_cmds:quickstart",
}


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


class LazyGroup(ReportingGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hub")
def cli() -> None:
    """Train, sign, publish and attach Houlsby adapters on a frozen BERT."""


def main() -> None:
    cli(prog_name="hub")
