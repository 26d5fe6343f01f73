"""Data parallel training (hubcli/local/distributed.py, launch.py): 2 gloo processes take the
steps one process takes with the same seed and global batch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from hubcli.data import sample_dataset
from hubcli.errors import OptionError
from hubcli.format import manifest as manifest_io
from hubcli.local.distributed import Group, from_environment

TRAIN, DEV = sample_dataset()


@pytest.fixture(scope="module")
def still_base(tiny_base_dir, tmp_path_factory):
    """The tiny BERT without dropout: runs are then deterministic, so the two can be compared
    weight by weight (with dropout each rank draws masks for its own shard)."""
    path = tmp_path_factory.mktemp("still") / "bert"
    shutil.copytree(tiny_base_dir, path)
    config = json.loads((path / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (path / "config.json").write_text(json.dumps(config))
    return path


def hub_train(*args) -> dict:
    done = subprocess.run([sys.executable, "-m", "hubcli", "train", *map(str, args)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_two_gloo_processes_take_the_steps_of_one(still_base, tmp_path):
    # 12 steps of a global batch of 16 with 2 accumulated batches of 8: each rank runs 4
    # examples of each batch; evaluation (rank 0) every 6 steps keeps the best. fp32: under
    # bf16 a shard's products round differently from the whole batch's (about 1e-4 apart)
    args = ["--base", still_base, "--train", TRAIN, "--validation", DEV, "--max-steps", 12,
            "--batch-size", 8, "--grad-accum", 2, "--eval-every", 6, "--max-length", 16,
            "--bottleneck", 4, "--precision", "fp32", "--quiet", "--json"]
    one = hub_train(*args, "--out", tmp_path / "one")
    two = hub_train(*args, "--out", tmp_path / "two", "--nproc", 2)
    a, b = (load_file(str(tmp_path / name / "adapter.safetensors")) for name in ("one", "two"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    assert max(abs(a[k]).max().item() for k in a) > 1e-2  # trained, not still at zero
    assert [r["step"] for r in two["history"]] == [6, 12]
    for r1, r2 in zip(one["history"], two["history"]):
        assert r2["train_loss"] == pytest.approx(r1["train_loss"], abs=1e-5)
        assert r2["accuracy"] == r1["accuracy"]
    training = manifest_io.read(tmp_path / "two")["training"]
    assert (training["processes"], training["steps"]) == (2, 12)


def test_two_processes_train_a_tagging_adapter_as_one(still_base, tmp_path):
    """Tagging's loss sums its tokens over a normaliser fixed for a whole batch, and each rank
    weighted its part again by its share of the rows: under --nproc 2 the loss (logged, and
    in the manifest) and the gradients were half the one process's."""
    data = Path(TRAIN).parent
    args = ["--task", "tagging", "--base", still_base, "--train", data / "ner_sample_train.conll",
            "--validation", data / "ner_sample_dev.conll", "--max-steps", 4, "--batch-size", 8,
            "--max-length", 16, "--bottleneck", 4, "--precision", "fp32", "--quiet", "--json"]
    one = hub_train(*args, "--out", tmp_path / "one")
    two = hub_train(*args, "--out", tmp_path / "two", "--nproc", 2)
    assert two["history"][-1]["train_loss"] == pytest.approx(one["history"][-1]["train_loss"],
                                                           rel=1e-4)
    a, b = (load_file(str(tmp_path / name / "adapter.safetensors")) for name in ("one", "two"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def test_ranks_shard_every_batch_alike():
    batch = list(range(7))
    shards = [Group(rank, 2).shard(batch) for rank in (0, 1)]
    assert shards == [[0, 2, 4, 6], [1, 3, 5]]
    assert Group().shard(batch) == batch


def test_torchrun_environment_makes_the_group(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert from_environment() == Group(3, 4, 1) and not from_environment().is_main
    from hubcli.local.launch import launch
    from hubcli.local.train import TrainSettings

    with pytest.raises(OptionError, match="--nproc 2: inside a distributed run"):
        launch(TrainSettings(train=TRAIN, out=Path("x")), 2)
    monkeypatch.delenv("WORLD_SIZE")
    assert from_environment() == Group()


def test_nproc_checks_the_options_before_starting_processes(tmp_path, monkeypatch):
    from hubcli.local import launch as launching
    from hubcli.local.train import TrainSettings

    monkeypatch.setattr(launching.subprocess, "Popen", lambda *a, **k: pytest.fail("started"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(OptionError, match="--out .*out: exists already"):
        launching.launch(TrainSettings(train=TRAIN, out=tmp_path / "out"), 2)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_to_hub_train_stops_every_process(still_base, tmp_path, sig):
    """SIGTERM to `hub train --nproc 2` (as `timeout`, systemd or a CI cancel send it) left
    torchrun and both ranks training, and their temp folder behind; Ctrl-C lost the word that
    a checkpoint was written. Now it is passed on: the ranks stop after their step, rank 0
    writes the checkpoint and says so, and nothing is left running. SIGHUP (the terminal
    closed) stops them as it stops one process, at once; it left them training too."""
    import signal

    out, log = tmp_path / "out", tmp_path / "log.jsonl"
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hubcli", "train", *map(str, (
            "--base", still_base, "--train", TRAIN, "--max-steps", 100000, "--batch-size", 4,
            "--max-length", 16, "--bottleneck", 4, "--quiet", "--log-every", 1,
            "--log-json", log, "--out", out, "--nproc", 2))],
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(__file__).parents[1])},
        # not ignored, as from a terminal, whatever this test runs under (under nohup or a
        # shell's `cmd &` it would be, and hub rightly keeps an ignored signal ignored)
        preexec_fn=lambda: signal.signal(getattr(signal, sig), signal.SIG_DFL))

    def left() -> list[int]:  # torchrun and the ranks: their command lines name `temp`
        pids = []
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and str(temp) in (p / "cmdline").read_text(errors="replace"):
                    pids.append(int(p.name))
            except OSError:  # gone meanwhile
                pass
        return pids

    try:
        deadline = time.monotonic() + 300
        while not (log.exists() and log.read_text().count("\n") >= 2):  # steps taken
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        proc.send_signal(getattr(signal, sig))
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1
        if sig == "SIGTERM":
            assert "error: training stopped by SIGTERM after step " in stderr
            assert (tmp_path / "out.ckpt").is_file()
        else:
            assert "error: a training process failed (torchrun exit status" in stderr
        assert not out.exists()
        assert list(temp.glob("hub-train-*")) == []  # the settings and result, gone with it
        time.sleep(1)
        assert left() == []
    finally:  # whatever failed, nothing goes on training
        proc.kill()
        for pid in left():
            os.kill(pid, signal.SIGKILL)


def test_a_signal_this_process_ignores_is_not_passed_on():
    """Under `nohup` (SIGHUP ignored) the run must outlive the terminal, as one process does:
    passed on, SIGHUP stopped torchrun and the ranks with it."""
    import signal

    from hubcli.local.launch import _passed_on

    class Child:
        sent: list = []

        def send_signal(self, sig: int) -> None:
            self.sent.append(sig)

    # as under nohup, whatever this test runs under (a shell's `cmd &` ignores SIGQUIT)
    before = {signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_IGN),
              signal.SIGQUIT: signal.signal(signal.SIGQUIT, signal.SIG_DFL)}
    try:
        with _passed_on(Child()):
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGQUIT)
            time.sleep(0.1)  # handlers run between bytecodes of the main thread
        assert Child.sent == [signal.SIGQUIT]
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
