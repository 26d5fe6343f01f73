"""Every bad `hub train` option is one `error:` line (exit 1), raised before any base loads."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.data import sample_dataset

CASES = {
    "layers beyond the base": (["--layers", "0-20"],
                               "error: --layers 0-20: no such layer: the base {base} has 2 layers, "
                               "numbered 0-1"),
    "layers with a gap": (["--layers", "0,5"],
                          "error: --layers 0,5: no such layer: the base {base} has 2 layers, "
                          "numbered 0-1"),
    "layers backwards": (["--layers", "3-1"],
                         "error: --layers 3-1: selects no layer (a range runs low-high)"),
    "negative init scale": (["--init-scale", "-1"],
                            "error: --init-scale -1.0: must be a number >= 0 (a standard deviation)"),
    "nan init scale": (["--init-scale", "nan"],
                       "error: --init-scale nan: must be a number >= 0 (a standard deviation)"),
    "negative lr": (["--lr", "-1"], "error: --lr -1.0: the learning rate must be a positive number"),
    "nan lr": (["--lr", "nan"], "error: --lr nan: the learning rate must be a positive number"),
    "zero lr": (["--lr", "0"], "error: --lr 0.0: the learning rate must be a positive number"),
    "bad version": (["--version", "not a version"],
                    "error: --version 'not a version': is not a semantic version"),
}


@pytest.mark.parametrize("args, first_line", CASES.values(), ids=CASES.keys())
def test_bad_train_option_is_one_line_before_the_base_loads(args, first_line, tiny_base_dir,
                                                             tmp_path, monkeypatch):
    def no_loading(*_a, **_k):
        raise AssertionError("the base was loaded before the options were checked")

    monkeypatch.setattr("hubcli.base.load.load_base", no_loading)
    train, _ = sample_dataset()
    result = CliRunner().invoke(cli, ["train", "--base", str(tiny_base_dir), "--train", str(train),
                                      "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0] == first_line.format(base=tiny_base_dir)
    assert result.stderr.splitlines()[1].startswith("hint: ")
    assert not (tmp_path / "out").exists()
