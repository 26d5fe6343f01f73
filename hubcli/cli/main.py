"""Entry point of `hub`: the lazily loaded command table (errors become messages in hubcli.reporting)."""

from __future__ import annotations

import importlib

import click

from hubcli import __version__
from hubcli.reporting import ReportingGroup

# Command modules are imported lazily so `hub --help` and fast commands never pay for torch.
# Each entry: command name -> "module:attribute".
COMMANDS: dict[str, str] = {
    "keygen": "hubcli.cli.signing_cmds:keygen",
    "bundle": "hubcli.cli.signing_cmds:bundle",
    "sign": "hubcli.cli.signing_cmds:sign",
    "verify": "hubcli.cli.signing_cmds:verify",
    "trust": "hubcli.cli.signing_cmds:trust",
    "train": "hubcli.cli.model_cmds:train_cmd",
    "fuse": "hubcli.cli.model_cmds:fuse_cmd",
    "eval": "hubcli.cli.model_cmds:eval_cmd",
    "predict": "hubcli.cli.model_cmds:predict_cmd",
    "export": "hubcli.cli.interop_cmds:export_cmd",
    "import": "hubcli.cli.interop_cmds:import_cmd",
    "login": "hubcli.cli.registry_cmds:login",
    "logout": "hubcli.cli.registry_cmds:logout",
    "whoami": "hubcli.cli.registry_cmds:whoami",
    "keys": "hubcli.cli.registry_cmds:keys",
    "push": "hubcli.cli.registry_cmds:push",
    "pull": "hubcli.cli.registry_cmds:pull",
    "search": "hubcli.cli.registry_cmds:search",
    "serve": "hubcli.cli.serve_cmds:serve_cmd",
    "quickstart": "hubcli.cli.registry_cmds:quickstart",
    "sweep": "hubcli.cli.analysis_cmds:sweep_cmd",
    "ablate": "hubcli.cli.analysis_cmds:ablate_cmd",
    "plot": "hubcli.cli.analysis_cmds:plot_cmd",
}


class LazyGroup(ReportingGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hub")
def cli() -> None:
    """Train, sign, publish and attach Houlsby adapters on a frozen BERT."""


def main() -> None:
    cli(prog_name="hub")
