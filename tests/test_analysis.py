"""`hub sweep`, `hub ablate`, `hub plot` and the layer switch they stand on."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.core.config import HoulsbyConfig
from hubcli.core.model import AdapterModel
from hubcli.data import sample_dataset
from hubcli.errors import AdapterError
from hubcli.local.train import TrainSettings, train
from test_core_routing import SEQ, TEXTS, _randomise, encode


def test_without_adapters_skips_only_the_adapter_modules_of_those_layers(base):
    model = AdapterModel(base.encoder).eval()
    model.add_adapter("a", HoulsbyConfig(bottleneck=4), SEQ)
    _randomise(model, "a", seed=1)
    batch = encode(base.tokenizer, TEXTS[:3])
    with torch.no_grad():
        model.activate("a")
        full = model.encode(**batch)
        with model.without_adapters(range(2)):
            removed = model.encode(**batch)
        assert torch.equal(model.encode(**batch), full)  # the switch ends with the block
        for site in model.adapter_sites.values():  # the same by hand: LayerNorm deltas only
            site.active = None
        deltas_only = model.encode(**batch)
    assert torch.equal(removed, deltas_only)
    assert not torch.allclose(removed, full, atol=1e-3)
    with pytest.raises(AdapterError, match="layer 2 does not exist: the base has layers 0-1"):
        with model.without_adapters([2]):
            pass


@pytest.fixture(scope="module")
def trained(tiny_base_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis")
    train_tsv, dev_tsv = sample_dataset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(out / "home"))
        train(TrainSettings(train=train_tsv, validation=dev_tsv, out=out / "sst", epochs=2,
                            base=str(tiny_base_dir), bottleneck=4, max_length=32, quiet=True),
              log=lambda _m: None)
    return out / "sst"


def test_ablate_scores_every_span_and_adapterdrop_and_writes_plots(trained, tmp_path):
    _, dev = sample_dataset()
    out = tmp_path / "ablation"
    result = CliRunner().invoke(cli, ["ablate", str(trained), "--data", str(dev), "--out",
                                      str(out), "--drop-lowest", "2", "--allow-unsigned", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {**json.loads((out / "ablation.json").read_text()), "files": doc["files"]}
    evaluated = CliRunner().invoke(cli, ["eval", str(trained), "--data", str(dev),
                                         "--allow-unsigned", "--json"])
    assert doc["full"] == pytest.approx(json.loads(evaluated.stdout)["metrics"]["accuracy"])
    spans = doc["spans"]
    assert len(spans) == 2 and spans[1][0] is None
    assert all(isinstance(spans[i][j], float) for i in range(2) for j in range(i, 2))
    labels = [line.rsplit("\t", 1)[1] for line in dev.read_text().splitlines()[1:]]
    assert doc["majority"] == pytest.approx(max(map(labels.count, set(labels))) / len(labels))
    assert [d["dropped"] for d in doc["drop"]] == [0, 1, 2]
    assert doc["drop"][0]["accuracy"] == doc["full"]
    assert doc["drop"][2]["accuracy"] == spans[0][1]  # skipping both = removing span 0..1
    assert (out / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (out / "ablation.svg").read_bytes()[:400]
    rows = list(csv.reader((out / "ablation.csv").open()))
    assert rows[0] == ["first_layer", "last_layer", "accuracy"] and len(rows) == 4
    assert (out / "adapterdrop.png").exists() and (out / "adapterdrop.csv").exists()


def test_plot_draws_the_training_history(trained, tmp_path):
    result = CliRunner().invoke(cli, ["plot", str(trained), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader((tmp_path / "training.csv").open()))
    assert rows[0][:2] == ["epoch", "train_loss"] and "accuracy" in rows[0]
    assert [r[0] for r in rows[1:]] == ["1", "2"]
    assert (tmp_path / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_keeps_the_best_run_and_resumes(tiny_base_dir, tmp_path):
    train_tsv, dev_tsv = sample_dataset()
    args = ["sweep", "--train", str(train_tsv), "--validation", str(dev_tsv), "--out",
            str(tmp_path), "--base", str(tiny_base_dir), "--bottleneck", "2,8", "--lr", "1e-3",
            "--epochs", "1", "--max-length", "32", "--quiet", "--json"]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    scores = [r["accuracy"] for r in doc["runs"]]
    assert sorted(r["bottleneck"] for r in doc["runs"]) == [2, 8]
    assert scores == sorted(scores, reverse=True)
    best = json.loads((tmp_path / "best" / "manifest.json").read_text())
    assert best["metrics"]["best"]["accuracy"] == scores[0]
    assert best["architecture"]["bottleneck"] == doc["runs"][0]["bottleneck"]
    weights = tmp_path / "runs" / "m2-lr0.001" / "adapter.safetensors"
    stamp = weights.stat().st_mtime_ns
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0 and again.stderr.count("finished before, kept") == 2
    assert weights.stat().st_mtime_ns == stamp
    assert json.loads(again.stdout)["runs"] == doc["runs"]
    assert (tmp_path / "sweep.png").exists() and (tmp_path / "sweep.csv").exists()


@pytest.mark.parametrize("lrs", ["1e-3,nan", "1e-3,inf"])
def test_sweep_grid_must_be_positive_numbers(tmp_path, lrs):
    """`inf` was taken, and refused only when its run came, after the others trained."""
    train_tsv, dev_tsv = sample_dataset()
    result = CliRunner().invoke(cli, ["sweep", "--train", str(train_tsv), "--validation",
                                      str(dev_tsv), "--out", str(tmp_path), "--lr", lrs])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        f"error: --lr {lrs}: is not a comma-separated list of positive numbers")


def _sweep_args(base, out, *more) -> list[str]:
    train_tsv, dev_tsv = sample_dataset()
    return ["sweep", "--train", str(train_tsv), "--validation", str(dev_tsv), "--out", str(out),
            "--base", str(base), "--bottleneck", "2", "--lr", "1e-3", "--epochs", "1",
            "--max-length", "32", "--quiet", "--json", *map(str, more)]


def test_sweep_keeps_runs_only_for_the_same_settings(tiny_base_dir, tmp_path):
    """Run again on the same --out with other data or options, a sweep kept the runs trained
    with the first ones and reported their scores as the new sweep's (with another task: a
    KeyError traceback). Now it refuses, naming each difference; a folder with runs and no
    record of their settings too. A grid value given twice is one run."""
    first = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path, "--lr", "1e-3,0.001"))
    assert first.exit_code == 0, first.output
    assert len(json.loads(first.stdout)["runs"]) == 1
    tiny = tmp_path.parent / "tiny.tsv"
    train_tsv, _ = sample_dataset()
    tiny.write_text("\n".join(train_tsv.read_text().splitlines()[:21]) + "\n")
    for more, said in ((["--seed", 7], "seed was 0, now 7"),
                       (["--validation", tiny], "validation was {'name': 'sentiment_dev.tsv'")):
        again = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path, *more))
        assert again.exit_code == 1
        line, hint = again.stderr.splitlines()[:2]
        assert line.startswith(f"error: --out {tmp_path}: holds the runs of a sweep with other "
                               f"settings: {said}")
        assert hint == "hint: give another --out, or that sweep's options to go on with it"
    (tmp_path / "sweep-settings.json").unlink()
    again = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path))
    assert again.exit_code == 1
    assert again.stderr.splitlines()[0] == (f"error: --out {tmp_path}: holds runs and no "
                                            "sweep-settings.json saying what they were "
                                            "trained with")


def test_sweep_names_bad_data_and_out_in_one_line(tiny_base_dir, tmp_path):
    """A missing data file, a folder given as data, a file as --out or in it were tracebacks
    from hashing the data for the settings record, before training checked anything."""
    afile = tmp_path / "afile"
    afile.write_text("hi\n")
    for more, line in ((["--train", tmp_path / "missing.tsv"],
                        f"error: {tmp_path / 'missing.tsv'}: file not found"),
                       (["--validation", tmp_path],
                        f"error: {tmp_path}: cannot read the file: Is a directory"),
                       (["--out", afile], f"error: --out {afile}: is a file, not a folder"),
                       (["--out", afile / "sub"],
                        f"error: --out {afile / 'sub'}: {afile} is a file, not a folder")):
        result = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path / "out", *more))
        assert result.exit_code == 1
        assert result.stderr.splitlines()[0] == line
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_sweep_that_failed_before_any_run_is_run_again_with_other_settings(
        tiny_base_dir, tmp_path):
    """A mistyped column failed the first run, but the settings were recorded: the corrected
    command was refused as 'a sweep with other settings' until the record was deleted by hand.
    With no run kept, the record is the new command's."""
    typo = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path, "--text-column", "txt"))
    assert typo.exit_code == 1 and "column 'txt' not found" in typo.stderr
    fixed = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path))
    assert fixed.exit_code == 0, fixed.output
    recorded = json.loads((tmp_path / "sweep-settings.json").read_text())
    assert recorded["columns"]["text"] is None


def test_a_stopped_sweep_resumes_its_run_from_the_checkpoint(tiny_base_dir, tmp_path,
                                                             monkeypatch):
    """A run stopped by a signal wrote a checkpoint and said 'run the same command with
    --resume', an option hub sweep does not have; run again, the sweep trained that run from
    the start. Now the hint is the sweep's, and the run resumes to the weights it would have
    had."""
    import contextlib
    import signal

    from safetensors.torch import load_file

    from hubcli.local import checkpoint

    whole = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path / "whole"))
    assert whole.exit_code == 0, whole.output
    real = checkpoint.stop_requests

    @contextlib.contextmanager
    def sigterm_at_once():  # as if one arrived during the first step
        yield [signal.SIGTERM]

    monkeypatch.setattr(checkpoint, "stop_requests", sigterm_at_once)
    stopped = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path / "cut"))
    assert stopped.exit_code == 1
    assert "training stopped by SIGTERM after step 1 of" in stopped.stderr
    assert ("hint: run the same hub sweep again: finished runs are kept, and this one resumes "
            "from its checkpoint") in stopped.stderr
    monkeypatch.setattr(checkpoint, "stop_requests", real)
    resumed = CliRunner().invoke(cli, _sweep_args(tiny_base_dir, tmp_path / "cut"))
    assert resumed.exit_code == 0, resumed.output
    assert "run 1/1: bottleneck 2, lr 0.001: resuming where it was stopped" in resumed.stderr
    assert "resumed from" in resumed.stderr
    weights = [load_file(tmp_path / w / "runs" / "m2-lr0.001" / "adapter.safetensors")
               for w in ("whole", "cut")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.allclose(weights[0][k], weights[1][k], atol=1e-6) for k in weights[0])


def test_ablate_record_puts_the_result_into_the_manifest_and_the_card(trained, tmp_path):
    import shutil

    folder = tmp_path / "sst"
    shutil.copytree(trained, folder)
    for step in (["keygen"], ["bundle", str(folder)], ["sign", str(folder)]):
        assert CliRunner().invoke(cli, step).exit_code == 0, step
    _, dev = sample_dataset()
    result = CliRunner().invoke(cli, ["ablate", str(folder), "--data", str(dev), "--out",
                                      str(tmp_path / "a"), "--record", "--allow-unsigned"])
    assert result.exit_code == 0, result.output
    assert "model.sig, which signed the old manifest; run `hub bundle" in result.stderr
    assert not (folder / "model.sig").exists()
    ablation = json.loads((folder / "manifest.json").read_text())["analysis"]["ablation"]
    assert ablation["data"] == dev.name and len(ablation["spans"]) == 2
    bundled = CliRunner().invoke(cli, ["bundle", str(folder)])
    assert bundled.exit_code == 0, bundled.output
    card = (folder / "README.md").read_text()
    assert "## Layer ablation" in card and "| layer removed | 0 | 1 |" in card
    assert f"majority class {ablation['majority']:.4f}" in card


def test_plot_of_a_run_evaluated_every_n_steps_is_against_the_step(tiny_base_dir, tmp_path):
    """A run with --eval-every drew every evaluation at its epoch (one vertical line) and
    plotted the step as a validation metric."""
    train_tsv, dev_tsv = sample_dataset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(tmp_path / "home"))
        train(TrainSettings(train=train_tsv, validation=dev_tsv, out=tmp_path / "a",
                            base=str(tiny_base_dir), bottleneck=4, max_length=32, max_steps=5,
                            eval_every=2, quiet=True), log=lambda _m: None)
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "a"), "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader((tmp_path / "p" / "training.csv").open()))
    assert rows[0][:3] == ["epoch", "step", "train_loss"] and rows[0].count("step") == 1
    assert [r[1] for r in rows[1:]] == ["2", "4", "5"]


@pytest.mark.parametrize("command", ["plot", "ablate"])
def test_plots_are_not_written_into_the_adapter_nor_onto_a_file(trained, tmp_path, command):
    """`--out` inside the adapter folder put files there its signature does not list (every
    later use of a signed adapter failed); a file as `--out` gave a FileExistsError
    traceback, after all the ablation's passes."""
    _, dev = sample_dataset()
    more = ["--data", str(dev), "--allow-unsigned"] if command == "ablate" else []
    for out, said, hint in (
            (trained / "plots", f"is inside the adapter folder {trained}, which takes no extra "
             "files (its signature and bundle list what it holds)", "name a folder outside it"),
            (tmp_path / "afile", "is a file, not a folder",
             "name a folder (it is made if missing)")):
        if out.name == "afile":
            out.write_text("mine\n")
        result = CliRunner().invoke(cli, [command, str(trained), "--out", str(out), *more])
        assert result.exit_code == 1
        assert result.stderr.splitlines()[:2] == [f"error: --out {out}: {said}", f"hint: {hint}"]
    assert not (trained / "plots").exists() and (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.parametrize("command", ["plot", "ablate", "sweep"])
def test_without_matplotlib_the_plots_are_refused_before_any_work(trained, tmp_path,
                                                                  monkeypatch, command):
    """Without the [analysis] extra, a sweep trained its whole grid and an ablation ran every
    pass, then ended in a ModuleNotFoundError traceback, the ablation's scores lost."""
    import sys

    train_tsv, dev = sample_dataset()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = {"plot": ["plot", str(trained), "--out", str(tmp_path / "p")],
            "ablate": ["ablate", str(trained), "--data", str(dev), "--out", str(tmp_path / "p"),
                       "--allow-unsigned"],
            "sweep": ["sweep", "--train", str(train_tsv), "--validation", str(dev), "--out",
                      str(tmp_path / "p")]}[command]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[:2] == [
        "error: the plots need matplotlib, which is not installed",
        'hint: pip install -e ".[analysis]" (or pip install matplotlib)']
    assert not (tmp_path / "p").exists()


def test_an_ablation_without_adapterdrop_leaves_no_earlier_adapterdrop_plot(trained, tmp_path):
    """Run again into the same --out without --drop-lowest, an ablation left the earlier run's
    AdapterDrop plot and CSV beside an ablation.json saying there was none."""
    _, dev = sample_dataset()
    out = tmp_path / "a"
    for more in (["--drop-lowest", "1"], []):
        result = CliRunner().invoke(cli, ["ablate", str(trained), "--data", str(dev), "--out",
                                          str(out), "--allow-unsigned", *more])
        assert result.exit_code == 0, result.output
    assert json.loads((out / "ablation.json").read_text())["drop"] is None
    assert sorted(p.name for p in out.iterdir()) == ["ablation.csv", "ablation.json",
                                                     "ablation.png", "ablation.svg"]


def test_the_heatmaps_colour_bar_reaches_its_marks(monkeypatch, tmp_path):
    """The full adapter's and the majority class's lines were drawn on a colour bar spanning
    the cells' scores only, so a mark outside them (the majority class, nearly always) was
    clipped away."""
    from hubcli.analysis import plots
    from hubcli.analysis.ablation import Ablation

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, stem: figures.append(fig) or [])
    plots.ablation_heatmap(Ablation("accuracy", 0.95, 0.5, [[0.8, 0.7], [None, 0.85]]),
                           tmp_path, "t")
    bar = figures[0].axes[1]
    assert bar.get_ylim() == pytest.approx((0.5, 0.95))
