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
    """Tiny sentiment adapters trained here (so they attach unsigned), on single texts and on
    sentence pairs (each line's sentence with the next's), and their HUB_HOME."""
    home = tmp_path_factory.mktemp("predict_home")
    runs = tmp_path_factory.mktemp("runs")
    train, _ = sample_dataset()
    rows = [line.split("\t") for line in train.read_text().splitlines()[1:]]
    pairs = runs / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tlabel\n" + "".join(
        f"{a[0]}\t{b[0]}\t{a[1]}\n" for a, b in zip(rows, rows[1:])))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(home))
        for name, data in (("tiny-sst", train), ("tiny-pairs", pairs)):
            result = run("train", "--base", tiny_base_dir, "--train", data,
                         "--out", runs / name, "--epochs", 1, "--bottleneck", 8,
                         "--max-length", 32, "--quiet")
            assert result.exit_code == 0, result.output
    return runs / "tiny-sst", home


@pytest.fixture
def folder(adapter, monkeypatch):
    out, home = adapter
    monkeypatch.setenv("HUB_HOME", str(home))
    return out


@pytest.fixture
def pairs_folder(folder):
    return folder.parent / "tiny-pairs"


def test_pair_flag_equals_a_tab_on_stdin(pairs_folder):
    flag = run("predict", pairs_folder, "a gripping film", "--pair", "the plot was dull",
               "--json")
    tab = run("predict", pairs_folder, "--json", input="a gripping film\tthe plot was dull\n")
    other = run("predict", pairs_folder, "a gripping film", "--pair", "i loved it", "--json")
    assert flag.exit_code == tab.exit_code == other.exit_code == 0, flag.output
    assert json.loads(flag.stdout)["score"] == json.loads(tab.stdout)["score"]
    assert json.loads(flag.stdout)["score"] != json.loads(other.stdout)["score"]


@pytest.mark.parametrize("pairs, args, stdin, first_line", [
    (False, ["a film", "--pair", "x"], None, "error: input 1 has a second text (--pair, or a "
     "TAB in the line), and tiny-sst was trained on single texts"),
    (False, [], "a film\nfine\tdull\n", "error: input 2 has a second text (--pair, or a TAB "
     "in the line), and tiny-sst was trained on single texts"),
    (True, ["a film"], None, "error: input 1 is one text, and tiny-pairs was trained on "
     "sentence pairs")])
def test_the_texts_an_adapter_was_not_trained_on_are_refused(folder, pairs_folder, pairs, args,
                                                              stdin, first_line):
    """A pair given to an adapter trained on single texts, or a single text to one trained on
    pairs, was predicted silently (as something the adapter never saw)."""
    result = run("predict", pairs_folder if pairs else folder, *args, input=stdin)
    assert result.exit_code == 1
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == \
        [first_line]


def test_adapters_that_do_not_record_their_texts_take_either(folder, tmp_path):
    """A manifest written before `training.text_pairs` was recorded is not checked."""
    from hubcli.api import AdapterHub
    from hubcli.errors import UsageError
    from hubcli.format import manifest as manifest_io

    old = tmp_path / "old"
    shutil.copytree(folder, old)
    m = manifest_io.read(old)
    del m["training"]["text_pairs"]
    (old / "manifest.json").write_text(json.dumps(m))
    hub = AdapterHub(m["base_model"]["name"])
    hub.load(old, allow_unsigned=True)
    assert len(hub.predict(["a film", "a film\tdull"])) == 2
    hub.load(folder, name="new", allow_unsigned=True)
    with pytest.raises(UsageError, match="input 1 has a second text .* and tiny-sst was"):
        hub.predict(["a film\tdull"], adapter=["new"])  # its manifest's name, not a slot


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
    copy = tmp_path / "elsewhere" / folder.name
    shutil.copytree(folder, copy)
    for args, hint in (([folder, "-a", folder, "a gripping film"], f"leave {folder} out"),
                       (["-a", folder, "a gripping film", folder], f"leave {folder} out"),
                       (["-a", folder, "a gripping film", copy], f"give it as -a {copy} too")):
        as_text = run("predict", *args)
        assert as_text.exit_code != 0
        assert f"error: {args[-1] if args[0] == '-a' else folder} is an adapter folder, and " \
               "with --adapter/-a every argument is a text" in as_text.stderr
        assert hint in as_text.stderr
    same = run("predict", "-a", "me/sst", "-a", "me/sst", "a gripping film")  # nothing pulled
    assert same.exit_code != 0 and "error: me/sst is given twice" in same.stderr
    twice = run("predict", "-a", folder, "-a", f"{folder}/../{folder.name}", "a gripping film")
    assert twice.exit_code == 1 and f"error: {folder}/../{folder.name} is given twice" \
        in twice.stderr and "give each adapter once" in twice.stderr
    same_name = run("predict", "-a", folder, "-a", copy, "a gripping film")
    assert same_name.exit_code == 1
    assert f"error: {folder} and {copy} are both adapter '{folder.name}'" in same_name.stderr
    assert "--name" in same_name.stderr
    nope = run("predict", "-a", folder, "-a", "nope", "a gripping film")
    assert nope.exit_code == 1 and "error: nope: no such adapter folder, nor a registry " \
        "reference" in nope.stderr
    base = run("predict", "-a", folder, "-a", "__base__", "a gripping film")
    assert base.exit_code != 0 and "error: __base__ (the untouched base) routes rows in " \
        "Python, it is not an adapter to load" in base.stderr


@pytest.mark.parametrize("texts", [["a film", ""], ["  "]])
def test_a_blank_text_is_refused_by_its_number(folder, texts):
    """An empty text was predicted as if it said something."""
    for adapters in ([folder], ["-a", folder]):
        result = run("predict", *adapters, *texts)
        assert result.exit_code == 1
        assert f"error: text {len(texts)} is blank" in result.stderr.splitlines()


def test_a_text_longer_than_a_file_name_is_a_text(folder, tmp_path):
    """Whether an argument is a folder was asked of the system, which raised OSError (file
    name too long) for a 277-character review: a traceback."""
    from hubcli.errors import ManifestError
    from hubcli.format import manifest as manifest_io

    review = "This film was a total delight from start to finish. " * 6
    for args in (["-a", folder, review], [folder, review]):
        result = run("predict", *args, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout.splitlines()[-1])["label"] in ("negative", "positive")
    alone = run("predict", review)  # no adapter given, none pulled: said so
    assert alone.exit_code == 1 and "error: no adapter given and none pulled yet" in alone.stderr
    with pytest.raises(ManifestError, match="no such adapter folder"):
        manifest_io.read(tmp_path / review)


def test_a_mistyped_adapter_folder_is_named_not_predicted(folder, monkeypatch):
    """`hub predict sst22 "text"` (the folder is sst2) read sst22 as a text for the adapter
    pulled last, or said no adapter was given."""
    monkeypatch.chdir(folder.parent)
    typo = folder.name + "x"
    result = run("predict", typo, "a fine film")
    assert result.exit_code == 1
    assert f"error: {typo}: no such adapter folder; did you mean ./{folder.name}?" in result.stderr
    with_a = run("predict", "-a", typo, "a fine film")
    assert with_a.exit_code == 1 and f"hint: did you mean ./{folder.name}?" in with_a.stderr
    for path_like in (f"./{typo}", str(folder.parent / typo)):  # spelt as typed
        r = run("predict", path_like, "a fine film")
        near = path_like[:-1]
        assert r.exit_code == 1 and f"hint: did you mean {near}?" in r.stderr, r.stderr
    assert run("predict", "a fine film").exit_code == 1  # a text with spaces: no folder near
    assert "none pulled yet" in run("predict", "brilliant").stderr  # nothing near either
    for args in (["~nosuchuser", "a fine film"], ["-a", "~nosuchuser/x", "a fine film"]):
        r = run("predict", *args)  # a home folder that cannot be found: a traceback
        assert r.exit_code == 1 and f"error: {args[-2]}: no such adapter folder" in r.stderr


def test_eval_refuses_data_the_adapter_was_not_trained_on(folder, pairs_folder, tmp_path):
    """`hub eval` of a single-text adapter on data with a second-text column read it as
    pairs (accuracy 0.72 against 0.79 on the first texts alone), and a pair adapter on
    single texts scored them; both silently."""
    pairs = folder.parent / "pairs.tsv"
    single = tmp_path / "single.tsv"
    single.write_text("sentence\tlabel\na fine film\tpositive\n")
    for adapter, data, problem in (
            (folder, pairs, "a second text, and tiny-sst was trained on single texts"),
            (pairs_folder, single, "one text, and tiny-pairs was trained on sentence pairs")):
        result = run("eval", adapter, "--data", data)
        assert result.exit_code == 1
        assert f"error: {data}:2: {problem}" in result.stderr.splitlines()
