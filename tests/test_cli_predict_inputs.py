"""How `hub predict` takes its inputs: --pair and --context (TAB on stdin), and very long
lines (a bounded prefix is tokenised, the echo is capped, a warning names the input)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.cli.output import MAX_ECHO_CHARS
from hubcli.data import sample_dataset
from hubcli.tasks.qa import QuestionAnswering
from hubcli.tasks.squad import QAExample


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def adapter(tiny_base_dir, tmp_path_factory):
    """A tiny sentiment adapter trained here (so it attaches unsigned) and its HUB_HOME."""
    home = tmp_path_factory.mktemp("predict_home")
    out = tmp_path_factory.mktemp("runs") / "tiny-sst"
    train, _ = sample_dataset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(home))
        result = run("train", "--base", tiny_base_dir, "--train", train, "--out", out,
                     "--epochs", 1, "--bottleneck", 8, "--max-length", 32, "--quiet")
        assert result.exit_code == 0, result.output
    return out, home


@pytest.fixture
def folder(adapter, monkeypatch):
    out, home = adapter
    monkeypatch.setenv("HUB_HOME", str(home))
    return out


def test_pair_flag_equals_a_tab_on_stdin(folder):
    flag = run("predict", folder, "a gripping film", "--pair", "the plot was dull", "--json")
    tab = run("predict", folder, "--json", input="a gripping film\tthe plot was dull\n")
    alone = run("predict", folder, "a gripping film", "--json")
    assert flag.exit_code == tab.exit_code == alone.exit_code == 0, flag.output
    assert json.loads(flag.stdout)["score"] == json.loads(tab.stdout)["score"]
    assert json.loads(flag.stdout)["score"] != json.loads(alone.stdout)["score"]


@pytest.mark.parametrize("args, first_line", [
    (["--context", "Anna lives in Oslo."],
     "error: --context does not apply to a classification adapter"),
    (["--pair", "x", "--context", "y"], "error: --pair and --context do not go together"),
])
def test_a_second_text_the_adapter_does_not_take_is_refused(folder, args, first_line):
    result = run("predict", folder, "a film", *args)
    assert result.exit_code == 1
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == \
        [first_line]


def test_context_flag_is_the_qa_context():
    qa = QuestionAnswering()
    assert qa.parse_input("Who?", "Anna did.") == qa.parse_input("Who?\tAnna did.") == \
        QAExample("Who?", "Anna did.")


def test_a_very_long_line_is_cut_with_a_warning_and_a_capped_echo(folder):
    line = "what a gripping film " * 20_000  # 420,000 characters
    long = run("predict", folder, "--json", input=line + "\n")
    assert long.exit_code == 0, long.output
    assert "warning: input 1: a text of 420,000 characters; only its first 32 tokens are used" \
        in long.stderr
    out = json.loads(long.stdout)
    assert len(out["text"]) == MAX_ECHO_CHARS and out["text"].endswith("…")
    short = run("predict", folder, "--json", input=line[:5000] + "\n")
    assert json.loads(short.stdout)["score"] == out["score"]  # the same first 32 tokens


def test_several_adapters_each_given_once_and_no_folder_read_as_a_text(folder, tmp_path):
    """With -a every argument is a text: a folder there is refused, not predicted on; a folder
    given twice (any spelling), or two adapters of one name, are refused with what to do."""
    for args in ([folder, "-a", folder, "a gripping film"],
                 ["-a", folder, "a gripping film", folder]):
        as_text = run("predict", *args)
        assert as_text.exit_code != 0
        assert f"error: {folder} is an adapter folder, and with --adapter/-a every argument " \
               "is a text" in as_text.stderr and f"-a {folder} too" in as_text.stderr
    same = run("predict", "-a", "me/sst", "-a", "me/sst", "a gripping film")  # nothing pulled
    assert same.exit_code != 0 and "error: me/sst is given twice" in same.stderr
    twice = run("predict", "-a", folder, "-a", f"{folder}/../{folder.name}", "a gripping film")
    assert twice.exit_code == 1 and f"error: {folder}/../{folder.name} is given twice" \
        in twice.stderr and "give each adapter once" in twice.stderr
    copy = tmp_path / "elsewhere" / folder.name
    shutil.copytree(folder, copy)
    same_name = run("predict", "-a", folder, "-a", copy, "a gripping film")
    assert same_name.exit_code == 1
    assert f"error: {folder} and {copy} are both adapter '{folder.name}'" in same_name.stderr
    assert "--name" in same_name.stderr
    base = run("predict", "-a", folder, "-a", "__base__", "a gripping film")
    assert base.exit_code != 0 and "error: __base__ (the untouched base) routes rows in " \
        "Python, it is not an adapter to load" in base.stderr
