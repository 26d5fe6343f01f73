"""ONNX export of base + adapter + head, and predicting with it under onnxruntime: the graph
passes onnx.checker, its logits match PyTorch's to 1e-4 at batch and sequence sizes other than
the traced ones, and `hub predict --runtime onnx` predicts what the PyTorch path predicts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from factories import make_adapter_dir

from hubcli.cli.main import cli

pytest.importorskip("onnxruntime")

TEXTS = ["a gripping, beautifully acted film about two brothers in Paris", "dull",
         "Angela Merkel visited Paris", "not bad at all"]
TAGGING = {"task": "tagging", "head": {"type": "token_classification", "num_outputs": 3,
                                       "labels": ["O", "B-PER", "B-LOC"]}}
ATTACH = {"allow_unsigned": True, "allow_base_mismatch": True}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(params=["classification", "tagging"])
def adapter(request, tmp_path):
    overrides = TAGGING if request.param == "tagging" else {}
    return make_adapter_dir(tmp_path / request.param, name=request.param, **overrides)


def test_onnx_logits_match_pytorch(adapter, tiny_base_dir, tmp_path):
    assert_onnx_matches_pytorch(adapter, tiny_base_dir, tmp_path)


@pytest.mark.parametrize("reads, skip", [("normed", "output"), ("normed", "sum"),
                                         ("input", "output")])
def test_onnx_logits_match_pytorch_for_each_bottleneck_form(reads, skip, tiny_base_dir,
                                                             tmp_path):
    adapter = make_adapter_dir(tmp_path / "form", name="form", seed=2, scale=0.3,
                               architecture={"reads": reads, "skip": skip})
    assert_onnx_matches_pytorch(adapter, tiny_base_dir, tmp_path)


def assert_onnx_matches_pytorch(adapter, tiny_base_dir, tmp_path):
    import onnx
    import torch

    from hubcli.interop.onnx_export import export_onnx
    from hubcli.interop.onnx_runtime import load_onnx
    from hubcli.local.inference import load_predictor

    out = tmp_path / "x.onnx"
    export_onnx(adapter, out, base=str(tiny_base_dir), **ATTACH)
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    runtime = load_onnx(out, base=str(tiny_base_dir))
    torch_side = load_predictor(adapter, base=str(tiny_base_dir), **ATTACH)
    for texts in (TEXTS, TEXTS[:1]):  # batch 4 with padding, and batch 1 with none
        feats = runtime.task.encode([runtime.task.parse_input(t) for t in texts],
                                    runtime.tokenizer, runtime.labels, runtime.max_length,
                                    with_targets=False)
        padded = runtime.task.padded_inputs(feats)
        with torch.inference_mode():
            expected = torch_side.model(*(torch.tensor(padded[k]) for k in
                                          ("input_ids", "attention_mask", "token_type_ids")))
        got = runtime.logits(padded)
        assert got.shape == tuple(expected.shape)
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=0)


def test_cli_export_then_predict_with_onnx_runtime(adapter, tiny_base_dir, tmp_path):
    out = tmp_path / "x.onnx"
    common = ("--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    exported = run("export", adapter, "--format", "onnx", "--out", out, *common)
    assert exported.exit_code == 0, exported.output
    assert out.stat().st_size > 0
    preds = {}
    for runtime in ("torch", "onnx"):
        result = run("predict", adapter, *TEXTS, "--runtime", runtime, "--json", *common)
        assert result.exit_code == 0, result.output
        preds[runtime] = [json.loads(line) for line in result.output.splitlines()
                          if line.startswith("{")]
    assert len(preds["onnx"]) == len(TEXTS)
    for ours, theirs in zip(preds["onnx"], preds["torch"]):
        assert ours.keys() == theirs.keys()
        if "label" in ours:
            assert ours["label"] == theirs["label"]
            assert ours["score"] == pytest.approx(theirs["score"], abs=1e-4)
        else:
            assert ours["tags"] == theirs["tags"]
            assert [e["score"] for e in ours["entities"]] == pytest.approx(
                [e["score"] for e in theirs["entities"]], abs=1e-4)


def test_a_damaged_cached_graph_is_exported_again(adapter, tiny_base_dir, hub_home):
    from hubcli.api import load_onnx_predictor
    from hubcli.settings import ONNX_CACHE_DIR

    first = load_onnx_predictor(adapter, base=str(tiny_base_dir), **ATTACH)
    (cached,) = (hub_home / ONNX_CACHE_DIR).iterdir()
    cached.write_bytes(b"damaged")
    notes: list[str] = []
    again = load_onnx_predictor(adapter, base=str(tiny_base_dir), notify=notes.append, **ATTACH)
    assert any("damaged; exporting again" in n for n in notes)
    batch = first.task.padded_inputs(first.task.encode(
        [first.task.parse_input(TEXTS[0])], first.tokenizer, first.labels, first.max_length,
        with_targets=False))
    np.testing.assert_array_equal(again.logits(batch), first.logits(batch))


def test_predict_onnx_refuses_a_file_that_is_not_an_export(tmp_path, tiny_base_dir):
    from hubcli.errors import AdapterError
    from hubcli.interop.onnx_runtime import load_onnx

    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"not a graph")
    with pytest.raises(AdapterError, match="not a readable ONNX graph"):
        load_onnx(bogus, base=str(tiny_base_dir))


def test_onnx_runtime_refuses_the_texts_the_adapter_was_not_trained_on(tiny_base_dir, hub_home,
                                                                        tmp_path):
    """As the torch runtime does: a pair for an adapter trained on single texts (the export
    carries `training.text_pairs`)."""
    single = make_adapter_dir(tmp_path / "single", name="single",
                              training={"text_pairs": False})
    result = run("predict", "--runtime", "onnx", "--base", tiny_base_dir, "--allow-unsigned",
                 "--allow-base-mismatch", single, "a film", "--pair", "dull")
    assert result.exit_code == 1
    assert "error: input 1 has a second text (--pair, or a TAB in the line), and single was " \
           "trained on single texts" in result.output


def test_a_cached_graph_is_refused_on_another_base_as_a_loaded_one_is(adapter, tiny_base_dir,
                                                                      hub_home):
    """Exported once with --allow-base-mismatch, the cached graph then ran on the other base
    without the flag and without a word: the base check was skipped on a cache hit."""
    from hubcli.api import load_onnx_predictor
    from hubcli.errors import BaseMismatchError

    notes: list[str] = []
    load_onnx_predictor(adapter, base=str(tiny_base_dir), **ATTACH)
    again = load_onnx_predictor(adapter, base=str(tiny_base_dir), notify=notes.append, **ATTACH)
    assert again is not None and any("--allow-base-mismatch" in n for n in notes)
    with pytest.raises(BaseMismatchError):
        load_onnx_predictor(adapter, base=str(tiny_base_dir), allow_unsigned=True)


def test_the_onnx_cache_keeps_the_most_recently_used_graphs(tmp_path):
    """Every adapter, base or manifest change added a graph the size of the base for good."""
    import os

    from hubcli.interop.onnx_runtime import CACHE_KEEP, _prune

    graphs = []
    for k in range(CACHE_KEEP + 3):
        graph = tmp_path / f"{k}.onnx"
        graph.write_bytes(b"g")
        os.utime(graph, (k, k))
        graphs.append(graph)
    os.utime(graphs[0], (100, 100))  # used again last
    _prune(tmp_path, keep=graphs[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        g.name for g in [graphs[0], graphs[1], *graphs[-(CACHE_KEEP - 2):]])


def test_onnx_export_writes_over_nothing_unasked(adapter, tiny_base_dir, tmp_path):
    """An existing file was replaced silently; a folder as --out gave an IsADirectoryError
    traceback after the whole trace; a full fine-tune was 'no manifest.json here'."""
    common = ("--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    mine = tmp_path / "mine.onnx"
    mine.write_text("precious\n")
    for out, said, hint in (
            (mine, "exists already", "pass --overwrite to replace it, or choose another --out"),
            (tmp_path, "is a folder", "name the .onnx file to write, e.g. --out sst2.onnx")):
        result = run("export", adapter, "--format", "onnx", "--out", out, *common)
        assert result.exit_code == 1
        assert result.stderr.splitlines()[:2] == [f"error: --out {out}: {said}", f"hint: {hint}"]
    assert mine.read_text() == "precious\n"
    result = run("export", adapter, "--format", "onnx", "--out", mine, "--overwrite", *common)
    assert result.exit_code == 0, result.output
    assert mine.read_bytes()[:4] != b"prec"
    finetuned = tmp_path / "ft"
    finetuned.mkdir()
    (finetuned / "finetune.json").write_text("{}")
    for args in (("export", finetuned, "--format", "onnx", "--out", tmp_path / "ft.onnx"),
                 ("predict", finetuned, "x", "--runtime", "onnx")):
        result = run(*args, *common)
        assert result.exit_code == 1
        assert result.stderr.splitlines()[0] == f"error: {finetuned} is a full fine-tune, not an adapter"


def test_predict_runs_an_exported_graph_file(adapter, tiny_base_dir, tmp_path):
    """`hub predict sst2.onnx TEXT` was 'no adapter given and none pulled yet': the file the
    README's export writes could not be predicted with."""
    out = tmp_path / "x.onnx"
    common = ("--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    assert run("export", adapter, "--format", "onnx", "--out", out, *common).exit_code == 0
    by_file = run("predict", out, *TEXTS, "--json", "--base", tiny_base_dir)
    assert by_file.exit_code == 0, by_file.output
    assert f"notice: {out} is an exported graph (base, adapter and head)" in by_file.stderr
    by_folder = run("predict", adapter, *TEXTS, "--runtime", "onnx", "--json", *common)
    assert by_file.stdout == by_folder.stdout and len(by_file.stdout.splitlines()) == len(TEXTS)
    torch_asked = run("predict", out, *TEXTS, "--runtime", "torch", "--base", tiny_base_dir)
    assert torch_asked.exit_code == 1  # it ran under onnxruntime without a word
    assert torch_asked.stderr.splitlines()[0] == (
        f"error: --runtime torch: {out} is an exported graph, which runs under onnxruntime")
    on_gpu = run("predict", out, *TEXTS, "--device", "cuda", "--base", tiny_base_dir)
    assert on_gpu.exit_code == 1  # its hint was --runtime torch, which is refused
    assert on_gpu.stderr.splitlines()[1] == (
        "hint: drop --device, or give the adapter's folder to run it with torch")
