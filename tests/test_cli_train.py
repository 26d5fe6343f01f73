"""`hub train`, `hub eval` and `hub predict` end to end on a tiny random BERT."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from click.testing import CliRunner

from factories import close

from hubcli.format import manifest as manifest_io
from hubcli.cli.main import cli
from hubcli.data import ner_sample, sample_dataset
from hubcli.local.finetune_dir import MARKER


def run(*args, input=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], input=input)
    return result


@pytest.fixture(scope="module")
def trained_once(tiny_base_dir, tmp_path_factory):
    """One adapter trained for 2 epochs on the shipped sentiment sample, shared by the module,
    with the HUB_HOME it was trained under (which remembers it as self-trained)."""
    home = tmp_path_factory.mktemp("trainer_home")
    out = tmp_path_factory.mktemp("runs") / "sst-adapter"
    train, dev = sample_dataset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(home))
        result = run("train", "--base", tiny_base_dir, "--train", train, "--validation", dev,
                     "--out", out, "--epochs", 2, "--bottleneck", 8, "--max-length", 32,
                     "--quiet", "--json")
    assert result.exit_code == 0, result.output
    return out, json.loads(result.output), home


@pytest.fixture()
def trained(trained_once, monkeypatch):
    out, summary, home = trained_once
    monkeypatch.setenv("HUB_HOME", str(home))
    return out, summary


def test_train_writes_a_valid_adapter_directory(trained):
    out, summary = trained
    assert sorted(p.name for p in out.iterdir()) == ["adapter.safetensors", "manifest.json"]
    m = manifest_io.read(out)
    assert m["name"] == "sst-adapter" and m["version"] == "0.1.0"
    assert m["head"]["labels"] == ["negative", "positive"]
    assert m["architecture"]["bottleneck"] == 8 and m["architecture"]["layers"] == [0, 1]
    assert m["architecture"]["init_scale"] == 1e-3  # tagging's default is larger (below)
    assert "reads" not in m["architecture"]  # the paper's form; tagging's reads normed (below)
    d, mm = 32, 8
    adapters = 2 * 2 * (2 * mm * d + d + mm)
    assert m["parameters"]["adapters"] == adapters == summary["parameters"]["adapters"]
    assert m["parameters"]["share"] == pytest.approx(m["parameters"]["trainable"] / m["parameters"]["base"], abs=1e-6)
    assert [row["epoch"] for row in m["metrics"]["validation"]] == [1, 2]
    assert m["training"]["train_data"]["examples"] == 400
    assert m["files"][0]["path"] == "adapter.safetensors"
    assert m["base_model"]["content_hash"].startswith("sha256:")
    best = m["training"]["best_epoch"]
    assert m["metrics"]["best"]["accuracy"] == max(r["accuracy"] for r in m["metrics"]["validation"])
    assert m["metrics"]["validation"][best - 1]["accuracy"] == m["metrics"]["best"]["accuracy"]


def test_eval_reports_metrics_as_json(trained, tiny_base_dir):
    out, _ = trained
    _, dev = sample_dataset()
    result = run("eval", out, "--data", dev, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["examples"] == 120
    assert set(doc["metrics"]) == {"accuracy", "macro_f1"}
    best = manifest_io.read(out)["metrics"]["best"]["accuracy"]
    assert doc["metrics"]["accuracy"] == pytest.approx(best, abs=1e-6)


def test_predict_takes_arguments_and_stdin(trained):
    out, _ = trained
    result = run("predict", out, "a gripping, beautifully acted film", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout.splitlines()[0])
    assert row["label"] in ("negative", "positive") and 0.5 <= row["score"] <= 1
    assert "not signed" in result.stderr  # self-trained notice, not a refusal
    piped = run("predict", out, input="first line\nsecond line\n")
    assert piped.exit_code == 0
    assert "first line" in piped.stdout and "second line" in piped.stdout


def test_unsigned_adapter_from_elsewhere_is_refused(trained, tmp_path, monkeypatch):
    out, _ = trained
    monkeypatch.setenv("HUB_HOME", str(tmp_path))  # another machine: never trained it
    result = run("predict", out, "text")
    assert result.exit_code == 1
    assert "not signed" in result.stderr and "--allow-unsigned" in result.stderr
    assert run("predict", out, "text", "--allow-unsigned").exit_code == 0


def test_attaching_to_another_base_is_refused_with_both_hashes(trained, tmp_path):
    import torch
    from transformers import BertConfig, BertModel

    out, _ = trained
    other = tmp_path / "other-base"
    torch.manual_seed(123)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=128)).save_pretrained(other)
    m = manifest_io.read(out)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(m["base_model"]["name"]).save_pretrained(other)
    result = run("predict", out, "text", "--base", other)
    assert result.exit_code == 1
    assert m["base_model"]["content_hash"] in result.stderr
    assert "--allow-base-mismatch" in result.stderr
    forced = run("predict", out, "text", "--base", other, "--allow-base-mismatch")
    assert forced.exit_code == 0 and "warning" in forced.stderr


def test_tagging_predicts_entity_spans_with_offsets(tiny_base_dir, tmp_path):
    train, dev = ner_sample()
    out = tmp_path / "ner"
    result = run("train", "--task", "tagging", "--format", "conll", "--base", tiny_base_dir,
                 "--train", train, "--validation", dev, "--out", out, "--epochs", 1,
                 "--bottleneck", 4, "--max-length", 32, "--quiet")
    assert result.exit_code == 0, result.output
    m = manifest_io.read(out)
    assert m["task"] == "tagging" and "B-PER" in m["head"]["labels"]
    assert m["head"]["label_scheme"] == "IOB1"  # predict decodes in this scheme's lattice
    # tagging's adapters start at BERT's init scale: from 1e-3 they learnt too slowly
    assert m["architecture"]["init_scale"] == 2e-2
    # and read LN(h + x): a point of entity F1 over the paper's form (tasks/tagging.py)
    assert (m["architecture"]["reads"], m["architecture"].get("skip", "output")) == (
        "normed", "output")
    assert set(m["metrics"]["validation"][0]) >= {"precision", "recall", "f1"}
    text = "Angela Merkel visited Paris ."
    pred = run("predict", out, "--json", input=text + "\n")
    assert pred.exit_code == 0, pred.output
    row = json.loads(pred.stdout)
    for ent in row["entities"]:
        assert text[ent["start"]:ent["end"]] == ent["text"]


def test_lora_method_trains_predicts_and_records_its_shape(trained, tiny_base_dir, tmp_path):
    train, dev = sample_dataset()
    out = tmp_path / "lora"
    result = run("train", "--method", "lora", "--rank", 4, "--alpha", 8, "--base", tiny_base_dir,
                 "--train", train, "--validation", dev, "--out", out, "--epochs", 1,
                 "--max-length", 32, "--quiet")
    assert result.exit_code == 0, result.output
    m = manifest_io.read(out)
    assert m["architecture"] == {"type": "lora", "rank": 4, "alpha": 8.0, "layers": [0, 1],
                                 "placement": ["query", "value"], "layernorm": "frozen"}
    assert m["parameters"]["adapters"] == 2 * 2 * (2 * 4 * 32) and m["parameters"]["layernorm"] == 0
    weights = load_file(str(out / "adapter.safetensors"))
    assert weights["adapters.0.query.B.weight"].abs().sum() > 0  # B moved away from zero
    pred = run("predict", out, "a gripping film", "--json")
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["label"] in ("negative", "positive")

    # several adapters: every text through each of them, in one routed pass
    sst, _ = trained
    both = run("predict", "-a", sst, "-a", out, "a gripping film", "dull", "--json")
    assert both.exit_code == 0, both.output
    rows = [json.loads(line) for line in both.stdout.splitlines()]
    assert [(r["text"], r["adapter"]) for r in rows] == [
        ("a gripping film", "sst-adapter"), ("a gripping film", "lora"),
        ("dull", "sst-adapter"), ("dull", "lora")]
    alone = json.loads(run("predict", sst, "dull", "--json").stdout)
    assert rows[2]["label"] == alone["label"]
    assert rows[2]["score"] == pytest.approx(alone["score"], abs=1e-5)
    text_table = run("predict", "-a", sst, "-a", out, "dull")
    assert text_table.exit_code == 0 and "adapter" in text_table.output.splitlines()[0]


def test_a_bottleneck_form_trains_predicts_and_records_itself(tiny_base_dir, tmp_path):
    train, dev = sample_dataset()
    out = tmp_path / "pfeiffer"
    result = run("train", "--reads", "normed", "--skip", "sum", "--bottleneck", 8,
                 "--base", tiny_base_dir, "--train", train, "--validation", dev, "--out", out,
                 "--epochs", 1, "--max-length", 32, "--quiet")
    assert result.exit_code == 0, result.output
    arch = manifest_io.read(out)["architecture"]
    assert (arch["reads"], arch["skip"]) == ("normed", "sum")
    pred = run("predict", out, "a gripping film", "--json")
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["label"] in ("negative", "positive")
    bad = run("train", "--reads", "after", "--train", train, "--out", tmp_path / "x")
    assert bad.exit_code == 2 and "'after' is not one of 'output', 'sum', 'normed', 'input'" \
        in bad.output


def test_an_adapter_in_the_top_layer_trains_its_own_layernorms_and_shares_the_rest(
        tiny_base_dir, tmp_path):
    """--layers 1 --layernorm own-layers: deltas on layer 1's LayerNorms only, so a Parallel
    of two such adapters runs layer 0 once and predicts what each predicts alone."""
    from hubcli.api import AdapterHub
    from hubcli.bundle.card import render_model_card
    from hubcli.core.composition import Parallel

    train, dev = sample_dataset()
    for seed in (0, 1):
        result = run("train", "--layers", "1", "--layernorm", "own-layers", "--bottleneck", 8,
                     "--base", tiny_base_dir, "--train", train, "--validation", dev,
                     "--out", tmp_path / f"top{seed}", "--epochs", 1, "--max-length", 32,
                     "--seed", seed, "--quiet")
        assert result.exit_code == 0, result.output
    arch = manifest_io.read(tmp_path / "top0")["architecture"]
    assert (arch["layers"], arch["layernorm"]) == ([1], "own-layers")
    assert "| LayerNorm | trained as deltas on the base's, in the adapter's layers only |" \
        in render_model_card(manifest_io.read(tmp_path / "top0"))
    hub = AdapterHub(base=str(tiny_base_dir))
    for seed in (0, 1):
        hub.load(tmp_path / f"top{seed}", name=f"top{seed}")
    assert hub.model.first_layer_acting(["top0", "top1"]) == 1
    texts = ["a gripping film", "dull and long"]
    together = hub.predict(texts, compose=Parallel("top0", "top1"))
    for seed in (0, 1):
        alone = hub.predict(texts, adapter=f"top{seed}")
        assert close([r[f"top{seed}"] for r in together], alone)  # labels and scores


def test_full_finetune_writes_a_model_folder_not_an_adapter(tiny_base_dir, tmp_path):
    train, dev = sample_dataset()
    out = tmp_path / "full"
    result = run("train", "--full-finetune", "--base", tiny_base_dir, "--train", train,
                 "--validation", dev, "--out", out, "--epochs", 1, "--max-length", 32, "--quiet")
    assert result.exit_code == 0, result.output
    assert (out / MARKER).is_file() and not (out / "manifest.json").exists()
    assert json.loads((out / MARKER).read_text())["kind"] == "full-finetune"
    scored = run("eval", out, "--data", dev, "--json")
    assert scored.exit_code == 0 and "accuracy" in json.loads(scored.stdout)["metrics"]
    paired = run("predict", out, "a film", "--pair", "dull")  # trained on single texts
    assert paired.exit_code == 1 and "trained on single texts" in paired.output


def test_bad_data_gets_one_line_naming_file_and_line(tiny_base_dir, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("review,stars\ngreat,5\n")
    result = run("train", "--base", tiny_base_dir, "--train", bad, "--out", tmp_path / "o")
    assert result.exit_code == 1
    assert f"{bad}:1" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_bad_layer_list_is_a_usage_error(tiny_base_dir, tmp_path):
    train, _ = sample_dataset()
    result = run("train", "--base", tiny_base_dir, "--train", train, "--out", tmp_path / "o",
                 "--layers", "one,two")
    assert result.exit_code == 1 and "'one,two' is not a layer list" in result.stderr


def test_auto_epochs_gives_small_data_enough_steps():
    from hubcli.local.train import auto_epochs

    assert auto_epochs(67_349, 32) == 3  # SST-2: the paper's 3 epochs
    assert auto_epochs(14_041, 32) == 3  # CoNLL-2003
    assert auto_epochs(4_000, 32) == 4  # 125 steps an epoch: 4 epochs reach 500
    assert auto_epochs(150, 32) == 20  # capped


def test_damaged_config_file_is_named_not_a_traceback(tmp_path, hub_home):
    (hub_home / "config.json").write_text('{"endpoint": "http://x",\n  oops}')
    result = run("predict", "some text")
    assert result.exit_code == 1
    assert f"{hub_home / 'config.json'}:2: not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_adapter_folder_is_named(tmp_path):
    result = run("predict", "./no-such-adapter", "text")
    assert result.exit_code == 1
    assert "./no-such-adapter: no such adapter folder" in result.stderr


def test_training_precision_is_resolved_and_recorded(trained, tiny_base_dir, tmp_path):
    from hubcli.local import precision

    out, _ = trained
    assert manifest_io.read(out)["training"]["precision"] == precision.resolve("auto")
    train, dev = sample_dataset()
    result = run("train", "--base", tiny_base_dir, "--train", train, "--validation", dev,
                 "--out", tmp_path / "bf16", "--epochs", 1, "--bottleneck", 8,
                 "--max-length", 32, "--precision", "bf16", "--quiet")
    assert result.exit_code == 0, result.output
    m = manifest_io.read(tmp_path / "bf16")
    assert m["training"]["precision"] == "bf16"
    assert math.isfinite(m["metrics"]["validation"][0]["train_loss"])
    # autocast leaves the trained tensors float32: only the matrix products ran in bf16
    tensors = load_file(str(tmp_path / "bf16" / "adapter.safetensors"))
    assert {t.dtype for t in tensors.values()} == {torch.float32}
    assert tensors["adapters.0.ffn_output.up.weight"].abs().max().item() > 2e-3  # moved from init


def test_auto_precision_follows_the_cpu(monkeypatch):
    from hubcli.local import precision
    from hubcli.errors import UsageError

    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    assert precision.resolve("auto") == "fp32"
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision.resolve("auto") == "bf16" and precision.resolve("fp32") == "fp32"
    with pytest.raises(UsageError, match="'fp16' does not run on cpu"):
        precision.resolve("fp16")
    lin = torch.nn.Linear(4, 4)
    with precision.autocast("bf16"):
        assert lin(torch.ones(2, 4)).dtype == torch.bfloat16
    with precision.autocast("fp32"):
        assert lin(torch.ones(2, 4)).dtype == torch.float32


@pytest.mark.parametrize("options, refused", [
    (["--rank", 4], "--rank 4: is for --method lora, and this trains --method houlsby"),
    (["--method", "lora", "--bottleneck", 16],
     "--bottleneck 16: is for --method houlsby, and this trains --method lora"),
    (["--method", "lora", "--layernorm", "own-layers"],
     "--layernorm own-layers: is for --method houlsby, and this trains --method lora"),
    (["--full-finetune", "--bottleneck", 4],
     "--bottleneck 4: is for adapters, and --full-finetune trains every weight instead")])
def test_the_other_methods_options_are_refused_not_ignored(tmp_path, options, refused):
    """`--rank` without `--method lora` trained a Houlsby adapter, and LoRA ignored Houlsby's
    options, silently."""
    train, _ = sample_dataset()
    result = run("train", *options, "--train", train, "--out", tmp_path / "x")
    assert result.exit_code != 0
    assert f"error: {refused}" in result.output.splitlines()
    assert not (tmp_path / "x").exists()
