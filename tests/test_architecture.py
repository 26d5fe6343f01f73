"""The layout's guard rails: the import contracts in pyproject.toml, and a command table whose
lazy entries all resolve."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hubcli.cli.main import COMMANDS, cli

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _subcommands() -> list[list[str]]:
    """Every command path: the lazy table's entries, and the subcommands of each group."""
    import click

    paths = []
    for name in sorted(COMMANDS):
        command = cli.get_command(click.Context(cli), name)
        paths.append([name])
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in sorted(command.commands)]
    return paths


@pytest.mark.parametrize("path", _subcommands(), ids=" ".join)
def test_every_subcommand_has_help(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: cli {' '.join(path)}"), result.output
