"""`hub export --format adapters`: our Houlsby adapter (each form the library has: its
double_seq_bn, seq_bn, par_bn) or LoRA, with a classification, regression, tagging or QA head,
as a folder the `adapters` library loads.
An imported adapter exports back to the library's own tensors; the library itself (when its
venv is there: ADAPTERS_VENV, which .ci/run makes, else /tmp/anchor-venv) computes our logits
from the export; LayerNorm deltas are refused unless dropped, and dropping them reports the
measured change."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import LORA, make_adapter_dir

from hubcli.cli.main import cli
from hubcli.interop.adapters_format import ADAPTER_WEIGHTS, HEAD_WEIGHTS

FIXTURES = Path(__file__).parent / "data" / "adapters_fixtures"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
BASE = str(FIXTURES / "base")
LIBRARY_PYTHON = Path(os.environ.get("ADAPTERS_VENV", "/tmp/anchor-venv")) / "bin" / "python"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# prints the library's outputs ({"logits"}, for QA {"start_logits", "end_logits"}) for an
# exported folder on the fixture base
LIBRARY_OUTPUTS = """
import json, sys, torch
from adapters import BertAdapterModel
base, folder, batch = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = BertAdapterModel.from_pretrained(base)
name = model.load_adapter(folder, use_safetensors=True)  # its loader reads .bin otherwise
model.set_active_adapters(name)
model.eval()
with torch.no_grad():
    output = model(**{k: torch.tensor(v) for k, v in batch.items()})
print(json.dumps({k: v.tolist() for k, v in output.items() if k.endswith("logits")}))
"""


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def library_outputs(folder: Path, fixture: str) -> dict:
    """What the library computes from `folder` on the inputs of `fixture`."""
    import torch

    batch = {k: EXPECTED[fixture][k] for k in INPUTS}
    theirs = subprocess.run([LIBRARY_PYTHON, "-c", LIBRARY_OUTPUTS, BASE, folder,
                             json.dumps(batch)], capture_output=True, text=True, check=True)
    return {k: torch.tensor(v) for k, v in json.loads(theirs.stdout.splitlines()[-1]).items()}


def as_our_logits(outputs: dict):
    """The library's logits, or its QA start and end logits as our [..., 2]."""
    import torch

    if "start_logits" in outputs:
        return torch.stack([outputs["start_logits"], outputs["end_logits"]], -1)
    return outputs["logits"]


def our_logits(adapter: Path, base: str):
    import torch

    from hubcli.local.inference import load_predictor

    predictor = load_predictor(adapter, base=base, allow_unsigned=True, allow_base_mismatch=True)
    with torch.inference_mode():
        return predictor.model(*(torch.tensor(EXPECTED["houlsby_cls_bin"][k]) for k in INPUTS))


def imported_and_exported(fixture: str, tmp_path) -> Path:
    """The library's `fixture` imported by `hub import`, then written back by `hub export
    --format adapters`: the exported folder."""
    ours, back = tmp_path / "ours", tmp_path / "back"
    assert run("import", FIXTURES / fixture, "--out", ours, "--base", BASE).exit_code == 0
    result = run("export", ours, "--format", "adapters", "--out", back, "--base", BASE)
    assert result.exit_code == 0, result.output
    return back


@pytest.mark.parametrize("fixture", ["houlsby_cls_bin", "lora_cls", "seq_bn_cls", "seq_bn_tag_st",
                                     "seq_bn_reg", "houlsby_qa"])
def test_an_imported_adapter_exports_back_to_the_librarys_tensors(fixture, tmp_path):
    import torch
    from safetensors.torch import load_file

    from hubcli.interop.adapters_import import read_library_weights

    back = imported_and_exported(fixture, tmp_path)
    for exported, originals in (("adapter.safetensors", ADAPTER_WEIGHTS),
                                ("model_head.safetensors", HEAD_WEIGHTS)):
        got = load_file(str(back / exported))
        want = read_library_weights(FIXTURES / fixture, originals)
        assert got.keys() == want.keys()
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=0, rtol=0)
    config = json.loads((back / "adapter_config.json").read_text())["config"]
    original = json.loads((FIXTURES / fixture / "adapter_config.json").read_text())["config"]
    for key in ("non_linearity", "mh_adapter", "output_adapter", "leave_out", "original_ln_before",
                "original_ln_after", "residual_before_ln", "is_parallel", "architecture", "r",
                "alpha", "attn_matrices", "selfattn_lora"):
        assert config.get(key) == original.get(key), key


@pytest.mark.skipif(not LIBRARY_PYTHON.exists(), reason="no venv with the adapters library")
@pytest.mark.parametrize("architecture", [
    {"layernorm": "frozen", "non_linearity": "silu", "layers": [1]},
    {**LORA, "layers": [1], "placement": ["value"]},
    {**LORA, "layers": [0, 1]},
    {"layernorm": "frozen", "reads": "normed", "non_linearity": "relu"},
    {"layernorm": "frozen", "reads": "normed", "skip": "normed", "placement": ["ffn_output"]},
    {"layernorm": "frozen", "reads": "normed", "skip": "sum", "layers": [0]},
    {"layernorm": "frozen", "reads": "input", "placement": ["attention_output"]}])
def test_the_adapters_library_computes_our_logits_from_the_export(architecture, tmp_path):
    from hubcli.base.hashing import content_hash

    adapter = make_adapter_dir(  # weights far from zero, so that a wrong form shows
        tmp_path / "ours", name="ours", seed=3, scale=0.3, head={"pooling": "cls"},
        base_model={"content_hash": content_hash(Path(BASE))}, architecture=architecture)
    out = tmp_path / "for-adapters"
    result = run("export", adapter, "--format", "adapters", "--out", out, "--base", BASE,
                 "--allow-unsigned")
    assert result.exit_code == 0, result.output
    import torch

    torch.testing.assert_close(library_outputs(out, "houlsby_cls_bin")["logits"],
                               our_logits(adapter, BASE), atol=1e-4, rtol=0)


@pytest.mark.skipif(not LIBRARY_PYTHON.exists(), reason="no venv with the adapters library")
@pytest.mark.parametrize("task, head", [
    ("regression", {"type": "regression", "num_outputs": 1, "labels": [], "pooling": "cls"}),
    ("tagging", {"type": "token_classification", "num_outputs": 3, "labels": ["O", "B-X", "I-X"],
                 "label_scheme": "IOB2"}),
    ("qa", {"type": "question_answering", "num_outputs": 2, "labels": []})])
def test_the_adapters_library_computes_our_heads_outputs_from_the_export(task, head, tmp_path):
    from hubcli.base.hashing import content_hash

    adapter = make_adapter_dir(
        tmp_path / "ours", name="ours", seed=4, scale=0.3, task=task, head=head,
        base_model={"content_hash": content_hash(Path(BASE))},
        architecture={"layernorm": "frozen"})
    out = tmp_path / "for-adapters"
    result = run("export", adapter, "--format", "adapters", "--out", out, "--base", BASE,
                 "--allow-unsigned")
    assert result.exit_code == 0, result.output
    import torch

    theirs, ours = as_our_logits(library_outputs(out, "houlsby_cls_bin")), our_logits(adapter, BASE)
    if ours.dim() == 3:  # per token: padded positions carry no prediction, compare the real ones
        mask = torch.tensor(EXPECTED["houlsby_cls_bin"]["attention_mask"]).bool()
        theirs, ours = theirs[mask], ours[mask]
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


@pytest.mark.skipif(not LIBRARY_PYTHON.exists(), reason="no venv with the adapters library")
@pytest.mark.parametrize("fixture", ["par_bn_cls", "seq_bn_post_add_cls", "seq_bn_reg",
                                     "houlsby_qa", "houlsby_tag_st"])
def test_an_imported_adapter_exports_to_the_librarys_own_outputs(fixture, tmp_path):
    import torch

    back = imported_and_exported(fixture, tmp_path)
    config = json.loads((back / "adapter_config.json").read_text())["config"]
    assert config["scaling"] == 1.0  # any scaling is folded into the up-projection
    theirs = library_outputs(back, fixture)
    assert theirs.keys() == {k for k in EXPECTED[fixture] if k.endswith("logits")}
    for key, got in theirs.items():
        torch.testing.assert_close(got, torch.tensor(EXPECTED[fixture][key]), atol=1e-4, rtol=0)


def test_a_form_the_library_lacks_is_refused_naming_the_field(tmp_path, tiny_base_dir):
    adapter = make_adapter_dir(tmp_path / "odd", name="odd", head={"pooling": "cls"},
                               architecture={"layernorm": "frozen", "reads": "sum"})
    result = run("export", adapter, "--format", "adapters", "--out", tmp_path / "x",
                 "--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == ("error: architecture.reads='sum' with skip='output' "
                                             "has no counterpart in the adapters library's "
                                             "bottlenecks")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("layernorm", [{"layernorm": "delta"},
                                       {"layernorm": "own-layers", "layers": [1]}],
                         ids=["every LayerNorm", "its own layers'"])
def test_layernorm_deltas_are_refused_unless_dropped_and_then_measured(tmp_path, tiny_base_dir,
                                                                       layernorm):
    from hubcli.data import sample_dataset

    adapter = make_adapter_dir(tmp_path / "ln", name="ln", head={"pooling": "cls"},
                               architecture=layernorm)
    common = ("--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    refused = run("export", adapter, "--format", "adapters", "--out", tmp_path / "x", *common)
    assert refused.exit_code == 1
    assert refused.output.splitlines()[0].startswith("error: the adapter trains LayerNorm deltas")
    assert not (tmp_path / "x").exists()
    dropped = run("export", adapter, "--format", "adapters", "--out", tmp_path / "x",
                  "--drop-layernorm-deltas", "--data", sample_dataset()[1], "--json", *common)
    assert dropped.exit_code == 0, dropped.output
    report = json.loads(dropped.output.splitlines()[-1])
    assert report["dropped_layernorm"] is True and report["metric"] == "accuracy"
    assert 0 <= report["with_deltas"] <= 1 and 0 <= report["without_deltas"] <= 1
    assert (tmp_path / "x" / "adapter.safetensors").is_file()


def test_mean_pooling_is_refused_naming_the_field(tmp_path, tiny_base_dir):
    adapter = make_adapter_dir(tmp_path / "mean", name="mean", architecture={"layernorm": "frozen"})
    result = run("export", adapter, "--format", "adapters", "--out", tmp_path / "x",
                 "--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith("error: head.pooling='mean'")


def test_export_and_import_write_over_no_folder_unasked(tmp_path, tiny_base_dir):
    """Both replaced whatever --out held: a folder of someone's files, or the adapter being
    exported itself. Now they refuse a folder with files, and with --overwrite replace only
    one of their own kind."""
    adapter = make_adapter_dir(tmp_path / "sst", name="sst", head={"pooling": "cls"},
                               architecture={"layernorm": "frozen"})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work\n")
    common = ("--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    export = ("export", adapter, "--format", "adapters")
    for args, said in (
            ((*export, "--out", mine, *common), "exists already"),
            ((*export, "--out", mine, "--overwrite", *common),
             "holds files that are not an adapters-library folder; --overwrite replaces only a "
             "folder `hub export --format adapters` wrote"),
            ((*export, "--out", adapter, "--overwrite", *common),
             "holds files that are not an adapters-library folder; --overwrite replaces only a "
             "folder `hub export --format adapters` wrote"),
            (("import", FIXTURES / "houlsby_cls_bin", "--out", mine, "--base", BASE),
             "exists already"),
            (("import", FIXTURES / "houlsby_cls_bin", "--out", mine, "--overwrite", "--base",
              BASE), "holds files that are not a trained adapter; --overwrite replaces only a "
                     "folder `hub train` wrote")):
        result = run(*args)
        assert result.exit_code == 1
        assert result.stderr.splitlines()[0] == f"error: --out {args[args.index('--out') + 1]}: {said}"
    assert (mine / "thesis.txt").read_text() == "years of work\n"
    assert (adapter / "manifest.json").is_file()
    out = tmp_path / "lib"
    for flags in ((), ("--overwrite",)):  # an earlier export of its own is replaced
        result = run(*export, "--out", out, *flags, *common)
        assert result.exit_code == 0, result.output
    imported = tmp_path / "imported"
    for flags in ((), ("--overwrite",)):
        result = run("import", FIXTURES / "houlsby_cls_bin", "--out", imported, *flags,
                     "--base", BASE)
        assert result.exit_code == 0, result.output


def test_a_dotted_name_is_exported_as_the_library_can_hold_it(tmp_path, tiny_base_dir):
    """The library keeps adapters in nn.ModuleDict, which takes no '.' in a key: an export of
    'sst2.v2' did not load there, and hub import refused it back."""
    adapter = make_adapter_dir(tmp_path / "dotted", name="sst2.v2", head={"pooling": "cls"},
                               architecture={"layernorm": "frozen"})
    out = tmp_path / "lib"
    result = run("export", adapter, "--format", "adapters", "--out", out, "--base", tiny_base_dir,
                 "--allow-unsigned", "--allow-base-mismatch")
    assert result.exit_code == 0, result.output
    assert ("notice: the adapters library takes no '.' in a name: sst2.v2 is exported as "
            "sst2_v2") in result.stderr
    assert json.loads((out / "adapter_config.json").read_text())["name"] == "sst2_v2"
    back = run("import", out, "--out", tmp_path / "back", "--base", tiny_base_dir)
    assert back.exit_code == 0, back.output
    if LIBRARY_PYTHON.exists():  # and the library loads it (CI has its venv)
        loads = subprocess.run([LIBRARY_PYTHON, "-c", "import sys; from adapters import "
                                "BertAdapterModel; m = BertAdapterModel.from_pretrained("
                                "sys.argv[1]); print(m.load_adapter(sys.argv[2], "
                                "use_safetensors=True))", str(tiny_base_dir), str(out)],
                               capture_output=True, text=True)
        assert loads.returncode == 0 and loads.stdout.split()[-1] == "sst2_v2", loads.stderr


def test_options_that_do_nothing_are_not_taken_silently(tmp_path, tiny_base_dir):
    """--data and --drop-layernorm-deltas did nothing with --format onnx, nor --data without
    deltas to drop, and said nothing."""
    from hubcli.data import sample_dataset

    _, dev = sample_dataset()
    adapter = make_adapter_dir(tmp_path / "sst", name="sst", head={"pooling": "cls"},
                               architecture={"layernorm": "frozen"})
    common = ("--base", tiny_base_dir, "--allow-unsigned", "--allow-base-mismatch")
    for args, said in (
            (("--format", "onnx", "--out", tmp_path / "x.onnx", "--drop-layernorm-deltas"),
             "error: --drop-layernorm-deltas applies to --format adapters"),
            (("--format", "onnx", "--out", tmp_path / "x.onnx", "--data", dev),
             "error: --data applies to --format adapters"),
            (("--format", "adapters", "--out", tmp_path / "x", "--data", dev),
             "error: --data measures what dropping the LayerNorm deltas changes")):
        result = run("export", adapter, *args, *common)
        assert result.exit_code == 1
        assert result.stderr.splitlines()[0] == said
    result = run("export", adapter, "--format", "adapters", "--out", tmp_path / "x",
                 "--drop-layernorm-deltas", "--data", dev, *common)
    assert result.exit_code == 0, result.output
    assert "notice: sst has no LayerNorm deltas, so --data measures nothing" in result.stderr
