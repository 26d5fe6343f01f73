"""`--device` and the precision each device runs, without a GPU: availability is replaced."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.errors import OptionError, UsageError
from hubcli.format import manifest as manifest_io
from hubcli.local import device, precision


@pytest.fixture
def machine(monkeypatch):
    """Set what this machine has: machine(cuda=2, mps=False)."""

    def have(cuda: int = 0, mps: bool = False) -> None:
        monkeypatch.setattr(device, "cuda_count", lambda: cuda)
        monkeypatch.setattr(device, "mps_available", lambda: mps)

    return have


def test_auto_takes_cuda_then_mps_then_cpu(machine):
    machine(cuda=2, mps=True)
    assert device.resolve("auto") == "cuda:0"
    assert device.resolve("auto", local_rank=1) == "cuda:1"
    machine(cuda=0, mps=True)
    assert device.resolve("auto") == "mps"
    machine()
    assert device.resolve("auto") == "cpu" and device.resolve("CPU") == "cpu"


def test_cuda_index_is_checked_against_the_machine(machine):
    machine(cuda=2)
    assert device.resolve("cuda") == "cuda:0" and device.resolve("cuda:1") == "cuda:1"
    assert device.resolve("cuda", local_rank=1) == "cuda:1"  # one GPU per distributed rank
    with pytest.raises(OptionError, match=r"--device cuda:2: this machine has 2 CUDA GPU\(s\), "
                                          r"numbered 0-1") as e:
        device.resolve("cuda:2")
    assert e.value.hint == "use cuda:0 to cuda:1"


@pytest.mark.parametrize("choice, problem", [
    ("cuda", "--device cuda: no CUDA GPU is available here"),
    ("cuda:0", "--device cuda:0: no CUDA GPU is available here"),
    ("mps", "--device mps: no Apple GPU (MPS) is available here"),
    ("tpu", "--device tpu: is not a device"),
    ("cuda:x", "--device cuda:x: is not a device"),
])
def test_a_missing_device_is_named(machine, choice, problem):
    machine()
    with pytest.raises(OptionError) as e:
        device.resolve(choice)
    assert str(e.value).startswith(problem)


@pytest.mark.parametrize("choice, kind, cpu_bf16, gpu_bf16, expected", [
    ("auto", "cpu", False, False, "fp32"),
    ("auto", "cpu", True, False, "bf16"),
    ("auto", "cuda", False, True, "bf16"),   # Ampere and later
    ("auto", "cuda", False, False, "fp16"),  # older GPUs: fp16 with a gradient scaler
    ("auto", "mps", True, True, "fp32"),
    ("fp16", "cuda", False, True, "fp16"),
    ("bf16", "cpu", False, False, "bf16"),  # asked for: emulated, slower, but allowed
    ("fp32", "cuda", True, True, "fp32"),
])
def test_precision_is_chosen_per_device(choice, kind, cpu_bf16, gpu_bf16, expected):
    assert precision.choose(choice, kind, cpu_bf16=cpu_bf16, gpu_bf16=gpu_bf16) == expected


def test_precisions_a_device_does_not_run_are_refused():
    with pytest.raises(UsageError, match="precision 'fp16' does not run on cpu") as e:
        precision.choose("fp16", "cpu", cpu_bf16=True, gpu_bf16=False)
    assert e.value.hint == "on cpu use fp32, bf16 or auto"
    with pytest.raises(UsageError, match="'fp8' is not one of auto, fp32, bf16, fp16"):
        precision.choose("fp8", "cuda", cpu_bf16=False, gpu_bf16=True)


def test_only_fp16_gets_an_active_grad_scaler():
    assert not precision.grad_scaler("bf16").is_enabled()
    assert not precision.grad_scaler("fp32").is_enabled()
    lin = torch.nn.Linear(4, 4)
    with precision.autocast("bf16", "cpu"):
        assert lin(torch.ones(2, 4)).dtype == torch.bfloat16


def test_train_refuses_a_missing_gpu_before_loading(machine, tiny_base_dir, tmp_path):
    machine()
    from hubcli.data import sample_dataset

    train, _ = sample_dataset()
    result = CliRunner().invoke(cli, ["train", "--base", str(tiny_base_dir), "--train",
                                      str(train), "--out", str(tmp_path / "a"),
                                      "--device", "cuda:1"])
    assert result.exit_code == 1, result.output
    assert "error: --device cuda:1: no CUDA GPU is available here" in result.stderr
    assert not (tmp_path / "a").exists()


def test_trained_manifest_records_device_and_precision(machine, tiny_base_dir, tmp_path):
    from hubcli.data import sample_dataset

    train, dev = sample_dataset()
    out = tmp_path / "a"
    result = CliRunner().invoke(cli, ["train", "--base", str(tiny_base_dir), "--train", str(train),
                                      "--out", str(out), "--max-length", "16", "--epochs", "1",
                                      "--bottleneck", "4", "--device", "cpu", "--precision",
                                      "fp32", "--quiet"])
    assert result.exit_code == 0, result.output
    manifest = manifest_io.read(out)
    assert (manifest["training"]["device"], manifest["training"]["precision"]) == ("cpu", "fp32")
    del manifest["training"]["device"]
    manifest_io.validate(manifest)  # manifests written before the device was recorded load
    # evaluation and prediction take --device as well, and name a device this machine lacks
    ok = CliRunner().invoke(cli, ["eval", str(out), "--data", str(dev), "--device", "cpu", "--json"])
    assert ok.exit_code == 0 and '"accuracy"' in ok.stdout
    machine(cuda=1)
    bad = CliRunner().invoke(cli, ["eval", str(out), "--data", str(dev), "--device", "cuda:3"])
    assert "error: --device cuda:3: this machine has 1 CUDA GPU(s), numbered 0-0" in bad.stderr
    machine()
    bad = CliRunner().invoke(cli, ["predict", str(out), "a fine film", "--device", "mps"])
    assert bad.exit_code == 1
    assert "error: --device mps: no Apple GPU (MPS) is available here" in bad.stderr
    ok = CliRunner().invoke(cli, ["predict", str(out), "a fine film", "--device", "auto", "--json"])
    assert ok.exit_code == 0 and '"label"' in ok.stdout
    # the path of several adapters (-a) runs on --device too: refused before the base loads,
    # or run there
    bad = CliRunner().invoke(cli, ["predict", "-a", str(out), "a fine film", "--device", "cuda"])
    assert bad.exit_code == 1 and "notice" not in bad.stderr  # before the adapters are read
    assert "error: --device cuda: no CUDA GPU is available here" in bad.stderr
    ok = CliRunner().invoke(cli, ["predict", "-a", str(out), "a fine film", "--device", "cpu",
                                  "--json"])
    assert ok.exit_code == 0 and '"adapter"' in ok.stdout
