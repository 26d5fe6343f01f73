"""A new user's first hour: every bad input is one `error:` line (exit 1) that names the real
problem, found before any base loads; and an adapter named with dots just works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import make_adapter_dir

from hubcli.api import AdapterHub
from hubcli.cli.main import cli
from hubcli.data import sample_dataset

NER = {"task": "tagging", "name": "tiny-ner",
       "head": {"type": "token_classification", "num_outputs": 3, "labels": ["O", "B-PER", "I-PER"]}}
ONE_CLASS = "sentence\tlabel\ngreat\tpositive\nlovely\tpositive\n"
NO_LABEL = "sentence\ngreat\nawful\n"
LAYERS = "no such layer: the base {base} has 2 layers, numbered 0-1"

# (command line, stdin, first line of stderr); {names} are filled from the `world` fixture
TRAIN = ["train", "--base", "{base}", "--train", "{train}", "--out", "{new}"]
CASES = {
    "layers beyond the base": ([*TRAIN, "--layers", "9-99"], None,
                               "error: --layers 9-99: " + LAYERS),
    "layers beyond the base, written as a range": ([*TRAIN, "--layers", "0-20"], None,
                                                   "error: --layers 0-20: " + LAYERS),
    "layers with a gap": ([*TRAIN, "--layers", "0,5"], None, "error: --layers 0,5: " + LAYERS),
    "layers backwards": ([*TRAIN, "--layers", "3-1"], None,
                         "error: --layers 3-1: selects no layer (a range runs low-high)"),
    "negative lr": ([*TRAIN, "--lr", "-1"], None,
                    "error: --lr -1.0: the learning rate must be a positive number"),
    "nan lr": ([*TRAIN, "--lr", "nan"], None,
               "error: --lr nan: the learning rate must be a positive number"),
    "zero lr": ([*TRAIN, "--lr", "0"], None,
                "error: --lr 0.0: the learning rate must be a positive number"),
    "negative init scale": ([*TRAIN, "--init-scale", "-1"], None,
                            "error: --init-scale -1.0: must be a number >= 0 (a standard deviation)"),
    "nan init scale": ([*TRAIN, "--init-scale", "nan"], None,
                       "error: --init-scale nan: must be a number >= 0 (a standard deviation)"),
    "version not semver": ([*TRAIN, "--version", "not a version"], None,
                           "error: --version 'not a version': is not a semantic version"),
    "base folder missing": (["train", "--base", "{missing}", "--train", "{train}", "--out", "{new}"],
                            None, "error: base model folder {missing} does not exist"),
    "out exists": ([*TRAIN[:-1], "{adapter}"], None, "error: --out {adapter}: exists already"),
    "out is a file": ([*TRAIN[:-1], "{file}"], None, "error: --out {file}: is a file, not a folder"),
    "overwrite what no training wrote": (
        [*TRAIN[:-1], "{stuff}", "--overwrite"], None,
        "error: --out {stuff}: holds files that are not a trained adapter; --overwrite replaces "
        "only a folder `hub train` wrote"),
    "single-class data": (["train", "--base", "{base}", "--train", "{one_class}", "--out", "{new}"],
                          None, "error: {one_class}: every example has the label 'positive'; "
                                "classification needs two classes at least"),
    "no label column": (["train", "--base", "{base}", "--train", "{no_label}", "--out", "{new}"],
                        None, "error: {no_label}:1: no label column (looked for label, labels, "
                              "score); columns are: sentence"),
    "tagging adapter on a TSV": (["eval", "{ner}", "--data", "{train}"], None,
                                 "error: {train} is a TSV file (by its extension), but the "
                                 "tagging adapter tiny-ner reads CoNLL"),
    "predict argument not UTF-8": (["predict", "{adapter}", "caf\udce9 au lait"], None,
                                   "error: text 1 is not UTF-8: byte 0xe9 at character 4"),
    "predict stdin not UTF-8": (["predict", "{adapter}"], b"fine\ncaf\xe9\n",
                                "error: <stdin>:2: not UTF-8 text: byte 0xe9 at byte 4 of the line"),
    "push a missing folder": (["push", "{missing}", "--registry", "http://127.0.0.1:9",
                               "--token", "t"], None, "error: {missing}: not a directory"),
}
# where the hint is the point of the fix, the hint too
HINTS = {"no label column": "hint: the file has no column besides sentence: add a label column "
                            "(the header 'label' is found without a flag)"}


@pytest.fixture
def world(tmp_path, tiny_base_dir) -> dict[str, str]:
    """Files and folders the cases point at."""
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("mine\n")
    (tmp_path / "file").write_text("x")
    (tmp_path / "one_class.tsv").write_text(ONE_CLASS)
    (tmp_path / "no_label.tsv").write_text(NO_LABEL)
    paths = {"adapter": make_adapter_dir(tmp_path / "sst2-adapter", name="sst2-adapter"),
             "ner": make_adapter_dir(tmp_path / "ner-adapter", **NER),
             "base": tiny_base_dir, "train": sample_dataset()[0], "new": tmp_path / "new",
             "file": tmp_path / "file", "stuff": tmp_path / "stuff",
             "one_class": tmp_path / "one_class.tsv", "no_label": tmp_path / "no_label.tsv",
             "missing": tmp_path / "does-not-exist"}
    return {k: str(v) for k, v in paths.items()}


@pytest.mark.parametrize("name", CASES)
def test_first_hour_errors_are_one_line_before_the_base_loads(name, world, monkeypatch):
    def no_loading(*_a, **_k):
        raise AssertionError("the base was loaded before the input was checked")

    monkeypatch.setattr("hubcli.base.load.load_base", no_loading)
    args, stdin, first_line = CASES[name]
    result = CliRunner().invoke(cli, [a.format(**world) for a in args], input=stdin)
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == first_line.format(**world)
    assert lines[1] == HINTS.get(name, lines[1]) and lines[1].startswith("hint: ")
    assert "Traceback" not in result.output
    assert not Path(world["new"]).exists()


def test_an_adapter_named_with_dots_trains_loads_and_predicts(tiny_base_dir, tmp_path):
    out = tmp_path / "sst2.v2"
    train, dev = sample_dataset()
    common = ["--base", str(tiny_base_dir), "--train", str(train), "--out", str(out),
              "--epochs", "1", "--bottleneck", "4", "--max-length", "16", "--quiet"]
    trained = CliRunner().invoke(cli, ["train", *common])
    assert trained.exit_code == 0, trained.output
    assert json.loads((out / "manifest.json").read_text())["name"] == "sst2.v2"
    predicted = CliRunner().invoke(cli, ["predict", str(out), "--json", "a gripping film"])
    assert predicted.exit_code == 0, predicted.output
    assert json.loads(predicted.stdout)["label"] in ("negative", "positive")

    hub = AdapterHub(str(tiny_base_dir))
    assert hub.load(out) == "sst2.v2"
    hub.load(out, name="train")  # shadows a Module attribute: escaped like a dot
    assert hub.adapters == ["sst2.v2", "train"]
    one, other = hub.predict(["a gripping film"] * 2, adapter=["sst2.v2", "train"])
    # the same weights under two names, routed row by row (float sums may differ in order)
    assert one["label"] == other["label"] and one["score"] == pytest.approx(other["score"])
    alone = hub.predict(["a gripping film"], adapter="sst2.v2")[0]
    assert alone["label"] == one["label"] and alone["score"] == pytest.approx(one["score"])


def test_overwrite_replaces_an_adapter_only_when_training_succeeds(tiny_base_dir, tmp_path):
    out = tmp_path / "sst"
    train, dev = sample_dataset()
    common = ["train", "--base", str(tiny_base_dir), "--train", str(train), "--out", str(out),
              "--epochs", "1", "--bottleneck", "4", "--max-length", "16", "--quiet"]
    assert CliRunner().invoke(cli, common).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad_dev = tmp_path / "dev.tsv"
    bad_dev.write_text("sentence\tlabel\nfine\tneutral\n")  # a label training never saw
    failed = CliRunner().invoke(cli, [*common, "--overwrite", "--validation", str(bad_dev)])
    assert failed.exit_code == 1
    assert failed.stderr.startswith(f"error: {bad_dev}:2: label 'neutral' was not in the "
                                    "training data")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.tsv", "sst"]  # no temp left
    replaced = CliRunner().invoke(cli, [*common, "--overwrite", "--seed", "1"])
    assert replaced.exit_code == 0, replaced.output
    assert (out / "adapter.safetensors").read_bytes() != before["adapter.safetensors"]
