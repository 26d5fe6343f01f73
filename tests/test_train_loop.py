"""Steps, gradient accumulation, evaluation every N steps, early stopping, checkpoints and
resuming (hubcli/local/loop.py, checkpoint.py) on a tiny random BERT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from hubcli.cli.main import cli
from hubcli.data import sample_dataset
from hubcli.format import manifest as manifest_io

TRAIN, DEV = sample_dataset()
TINY = ["--max-length", "16", "--bottleneck", "4", "--quiet"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "adapter.safetensors"))


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_max_steps_and_eval_every_keep_the_best_step(tiny_base_dir, tmp_path):
    log = tmp_path / "log.jsonl"
    out = tmp_path / "a"
    result = run("train", "--base", tiny_base_dir, "--train", TRAIN, "--validation", DEV,
                 "--out", out, "--max-steps", 10, "--eval-every", 4, "--batch-size", 16,
                 "--grad-accum", 2, "--log-json", log, "--log-every", 5, *TINY, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # evaluated at steps 4 and 8, and at the last step (10) so the last weights are scored too
    assert [row["step"] for row in summary["history"]] == [4, 8, 10]
    m = manifest_io.read(out)
    t = m["training"]
    assert (t["steps"], t["grad_accum"], t["batch_size"]) == (10, 2, 16)
    rows = m["metrics"]["validation"]
    best = max(rows, key=lambda r: r["accuracy"])  # the first of the best, as kept
    assert t["best_step"] == best["step"] and m["metrics"]["best"]["accuracy"] == best["accuracy"]
    # 10 steps x 32 examples: within the first epoch of 400 examples
    assert [r["epoch"] for r in rows] == [1, 1, 1]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    train_lines = [line for line in lines if "loss" in line]
    assert [line["step"] for line in train_lines] == [5, 10]
    assert all(line["examples_per_s"] > 0 and line["lr"] >= 0 for line in train_lines)
    assert train_lines[0]["eta_s"] > 0 and train_lines[-1]["eta_s"] == 0  # 5 steps left, none
    assert [line["step"] for line in lines if "accuracy" in line] == [4, 8, 10]


def test_patience_stops_when_the_score_stops_improving(tiny_base_dir, tmp_path):
    # a learning rate too small to change a prediction: every evaluation after the first
    # ties it, which is not better, so patience 2 runs out at the third evaluation
    out = tmp_path / "a"
    result = run("train", "--base", tiny_base_dir, "--train", TRAIN, "--validation", DEV,
                 "--out", out, "--max-steps", 40, "--eval-every", 2, "--patience", 2,
                 "--lr", "1e-12", *TINY, "--json")
    assert result.exit_code == 0, result.output
    assert [row["step"] for row in json.loads(result.stdout)["history"]] == [2, 4, 6]
    assert manifest_io.read(out)["training"]["steps"] == 6


@pytest.mark.parametrize("args, message", [
    (["--max-steps", 5, "--epochs", 2], "--max-steps 5: and --epochs both set the run's length"),
    (["--patience", 3], "--patience 3: stops when the validation score stops improving"),
    (["--resume"], "no checkpoint there"),
])
def test_schedule_options_that_do_not_go_together(tiny_base_dir, tmp_path, args, message):
    result = run("train", "--base", tiny_base_dir, "--train", TRAIN, "--out", tmp_path / "a",
                 *args)
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.stderr


def test_grad_accum_equals_one_batch_of_the_same_examples(tiny_base_dir, tmp_path):
    """Two accumulated batches of 8 make the step one batch of 16 makes (dropout off)."""
    from hubcli.local.batching import EpochBatches
    from hubcli.local.distributed import Group
    from hubcli.local.loop import Trainer
    from hubcli.local.train import TrainSettings, _placed, _Run
    from hubcli.base.load import load_base
    from hubcli.tasks import get_task

    def one_step(split: bool) -> dict:
        s = _placed(TrainSettings(train=TRAIN, out=tmp_path / "x", max_steps=1, batch_size=16,
                                  max_length=16, bottleneck=4, precision="fp32", quiet=True),
                    Group())
        task = get_task("classification")
        examples = task.read(TRAIN)[:16]
        labels = task.label_names(task.read(TRAIN))
        torch.manual_seed(0)
        base = load_base(str(tiny_base_dir))
        run_ = _Run(s, task, labels, base, lambda _m: None)
        feats = task.encode(examples, base.tokenizer, labels, 16)
        trainer = Trainer(run_, EpochBatches(feats, 16, 0, by_length=False), Group(), print)
        run_.model.eval()  # no dropout: the two steps see exactly the same computation
        loss, n, _ = trainer.step([feats[:8], feats[8:]] if split else [feats], False)
        assert n == 16
        return {"loss": loss, **{k: v.clone() for k, v in run_.snapshot().items()}}

    whole, split = one_step(False), one_step(True)
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-6)
    assert max(abs(split[k] - whole[k]).max().item() for k in whole if k != "loss") < 1e-6


# A run long enough to be stopped half way (60 steps of 8 examples), evaluating every 20 steps
# so the checkpoint holds best weights and history too; dropout on, so the RNG states matter.
LONG = ["--max-steps", 60, "--batch-size", 8, "--eval-every", 20, "--checkpoint-every", 5]


def hub(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hubcli", "train", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})


@pytest.fixture(scope="module")
def uninterrupted(tiny_base_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "a"
    proc = hub("--base", tiny_base_dir, "--train", TRAIN, "--validation", DEV, "--out", out,
               *LONG, *TINY)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    return weights(out), manifest_io.read(out)


def stop_after_first_checkpoint(proc: subprocess.Popen, ckpt: Path, sig: int) -> None:
    deadline = time.monotonic() + 120
    while not ckpt.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(sig)
    proc.wait(timeout=60)


def checkpoint_step(ckpt: Path) -> int:
    return torch.load(ckpt, weights_only=True)["progress"]["step"]


def test_a_run_killed_half_way_resumes_to_the_same_weights(tiny_base_dir, tmp_path,
                                                           uninterrupted):
    out, ckpt = tmp_path / "a", tmp_path / "a.ckpt"
    args = ["--base", tiny_base_dir, "--train", TRAIN, "--validation", DEV, "--out", out,
            *LONG, *TINY]
    proc = hub(*args)
    stop_after_first_checkpoint(proc, ckpt, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL and not out.exists()
    assert 5 <= checkpoint_step(ckpt) < 60  # killed between two checkpoints, half way or so
    resumed = hub(*args, "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert max_difference(weights(out), uninterrupted[0]) < 1e-6
    m = manifest_io.read(out)
    assert m["metrics"] == uninterrupted[1]["metrics"]  # history and best carried over
    assert m["training"]["steps"] == 60
    assert not ckpt.exists()  # removed once the trained folder is written


def test_sigterm_writes_a_checkpoint_and_says_how_to_resume(tiny_base_dir, tmp_path,
                                                           uninterrupted):
    out, ckpt = tmp_path / "a", tmp_path / "a.ckpt"
    args = ["--base", tiny_base_dir, "--train", TRAIN, "--validation", DEV, "--out", out,
            *LONG, *TINY]
    proc = hub(*args)
    stop_after_first_checkpoint(proc, ckpt, signal.SIGTERM)
    stderr = proc.stderr.read()
    assert proc.returncode == 1, stderr
    step = checkpoint_step(ckpt)
    assert f"error: training stopped by SIGTERM after step {step} of 60; checkpoint written " \
           f"to {ckpt}" in stderr
    assert "hint: run the same command with --resume to continue" in stderr
    # a resume with other settings is refused, naming what changed
    other = run("train", *args[:-len(TINY)], "--batch-size", 4, *TINY, "--resume")
    assert other.exit_code == 1 and "batch_size was 8, now 4" in other.stderr
    resumed = hub(*args, "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert max_difference(weights(out), uninterrupted[0]) < 1e-6


def test_a_checkpoint_without_a_form_had_houlsbys_and_a_resume_says_so(tmp_path):
    from hubcli.errors import OptionError
    from hubcli.local import checkpoint

    ckpt = tmp_path / "a.ckpt"
    checkpoint.save(ckpt, {"fingerprint": {"task": "tagging", "seed": 0}})
    assert checkpoint.load(ckpt, {"task": "tagging", "seed": 0})["fingerprint"]["seed"] == 0
    with pytest.raises(OptionError, match="reads was 'output', now 'normed'"):
        checkpoint.load(ckpt, {"task": "tagging", "seed": 0, "reads": "normed"})
    # and the other way: a setting the checkpoint records, left at its default now
    own = tmp_path / "own.ckpt"
    checkpoint.save(own, {"fingerprint": {"seed": 0, "layernorm": "own-layers"}})
    with pytest.raises(OptionError, match="layernorm was 'own-layers', now 'delta'"):
        checkpoint.load(own, {"seed": 0})


def test_the_checkpoint_fingerprint_names_a_bottleneck_form_only_where_it_is_not_houlsbys(
        tmp_path):
    """So a checkpoint written before forms (and per-task init scales) existed still resumes."""
    from types import SimpleNamespace

    from hubcli.local.loop import fingerprint
    from hubcli.local.train import TrainSettings

    train = tmp_path / "t.tsv"
    train.write_text("a film\tpos\n")
    source = SimpleNamespace(examples=1)
    houlsby = fingerprint(TrainSettings(train=train, out=tmp_path / "o"), source, 10)
    pf = fingerprint(TrainSettings(train=train, out=tmp_path / "o", reads="normed"), source, 10)
    assert "reads" not in houlsby and "skip" not in houlsby and "layernorm" not in houlsby
    assert pf == {**houlsby, "reads": "normed"}
    assert fingerprint(TrainSettings(train=train, out=tmp_path / "o", layernorm="own-layers"),
                       source, 10) == {**houlsby, "layernorm": "own-layers"}
    # the init scale only where given: the default moved (2e-2 for tagging), and checkpoints
    # that recorded the old one must still resume
    assert "init_scale" not in houlsby
    assert fingerprint(TrainSettings(train=train, out=tmp_path / "o", init_scale=0.05), source,
                       10) == {**houlsby, "init_scale": 0.05}
    # a task's own form counts as given: a tagging run of the paper's form does not resume it
    tagging = fingerprint(TrainSettings(train=train, out=tmp_path / "o", task="tagging"), source,
                          10)
    assert tagging["reads"] == "normed"
    for other in ({"reads": "output"}, {"method": "lora"}, {"full_finetune": True},
                  {"compose": "fuse"}):  # given, or no bottleneck trained
        assert "reads" not in fingerprint(TrainSettings(train=train, out=tmp_path / "o",
                                                        task="tagging", **other), source, 10)
