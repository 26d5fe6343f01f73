"""`hub quickstart` end to end on the packaged base (short: one epoch on a small sample)."""

from __future__ import annotations

import re
import time

import pytest
from click.testing import CliRunner

from hubcli import quickstart

from hubcli.remote import pull_records as pulled
from hubcli.cli.main import cli
from hubcli.errors import UsageError
from hubcli.settings import load_config

pytestmark = pytest.mark.integration


def test_quickstart_runs_the_whole_loop(tmp_path):
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["quickstart", "--epochs", "1", "--sample", "64",
                                      "--workdir", str(tmp_path / "qs")])
    elapsed = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    steps = [re.match(r"\[\s*(\d+)/11\] (\S+(?: upload)?)", line) for line in lines[:11]]
    assert [(int(m[1]), m[2]) for m in steps] == list(enumerate(quickstart.STEPS, start=1))
    assert "serving http://127.0.0.1:" in lines[4]
    assert "demo/sentiment-adapter 0.1.0" in lines[7]
    assert "verified, signed by self (sha256:" in lines[8]
    assert "base sentence-transformers/all-MiniLM-L6-v2 is on this machine" in lines[9]
    predictions = lines[13:17]
    assert all(re.search(r"(positive|negative) \(0\.\d{3}\)$", p) for p in predictions)
    assert "now uses demo/sentiment-adapter@0.1.0" in lines[17]
    assert load_config()["last_pulled"] == "demo/sentiment-adapter@0.1.0"
    record = pulled.find("demo/sentiment-adapter", "0.1.0")
    assert record is not None and record.key_id is not None
    assert "registry" not in load_config()  # the stopped registry is not the default
    assert elapsed < 180


def test_quickstart_refuses_a_used_workdir(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(UsageError, match="is not empty"):
        quickstart.run(quickstart.QuickstartSettings(workdir=tmp_path))
