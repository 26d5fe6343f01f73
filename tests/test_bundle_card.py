"""hub bundle: the model card and the manifest's files list."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from click.testing import CliRunner
from factories import make_adapter_dir

from hubcli.bundle import check_bundle, make_bundle, render_model_card
from hubcli.cli.main import cli
from hubcli.errors import BundleError


def front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_bundle_writes_the_card_and_lists_it_in_the_manifest(tmp_path):
    d = make_adapter_dir(tmp_path / "sst2-adapter", name="sst2-adapter")
    result = CliRunner().invoke(cli, ["bundle", str(d)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"bundled {d}: sst2-adapter 1.0.0, 2 files listed in manifest.json",
        f"next: hub sign {d}"]
    card = (d / "README.md").read_bytes()
    files = json.loads((d / "manifest.json").read_text())["files"]
    assert files[1] == {"path": "README.md", "sha256": hashlib.sha256(card).hexdigest(),
                        "size": len(card)}
    assert check_bundle(d, require_readme=True)["files"] == files


def test_front_matter_follows_the_hugging_face_model_card_format(bundle_dir):
    meta = front_matter((bundle_dir / "README.md").read_text())
    assert meta["library_name"] == "adapter-hub"
    assert meta["base_model"] == "tiny-bert"
    assert meta["base_model_relation"] == "adapter"
    assert meta["license"] == "apache-2.0"
    assert meta["datasets"] == ["sst2"]
    assert {"houlsby-adapter", "text-classification", "classification"} <= set(meta["tags"])
    (index,) = meta["model-index"]
    assert index["name"] == "sst2-adapter"
    (result,) = index["results"]
    assert result["task"] == {"type": "text-classification"}
    assert result["dataset"] == {"name": "sst2", "type": "sst2", "split": "validation"}
    assert {m["type"]: m["value"] for m in result["metrics"]} == {"accuracy": 0.85, "loss": 0.4}


def test_body_says_what_it_is_and_how_to_use_it(bundle_dir):
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    body = (bundle_dir / "README.md").read_text().split("---\n", 2)[2]
    weights_sha = manifest["files"][0]["sha256"]
    for line in [
        "# sst2-adapter",
        "| Base content hash | `sha256:" + "ab" * 32 + "` |",
        "| Bottleneck size | m = 4 (each adapter maps d -> m -> d) |",
        "| Placement | after attention_output and ffn_output in layers 0-1, gelu non-linearity |",
        "| Trainable parameters | 2,610 = 0.26% of the base's 1,000,000 |",
        f"| Weights | `adapter.safetensors`, sha256 `{weights_sha}` |",
        "| 2 | 0.8500 | 0.4000 |",
        "Reported (epoch 2, chosen by accuracy): accuracy 0.8500, loss 0.4000.",
        "hub pull NAMESPACE/sst2-adapter@1.0.0   # downloads, then checks signature and digests",
        'hub predict NAMESPACE/sst2-adapter "a text to run the adapter on"',
    ]:
        assert line in body.splitlines()
    assert "for text classification (2 labels: negative, positive) on the frozen base model " \
           "`tiny-bert`" in body


def test_card_for_regression_without_metrics(tmp_path):
    d = make_adapter_dir(tmp_path / "sts", name="sts", task="regression",
                         head={"type": "regression", "num_outputs": 1, "labels": []},
                         metrics={"validation": [], "best": {}},
                         training={"dataset": "glue/stsb"}, license="mit")
    card = render_model_card(json.loads((d / "manifest.json").read_text()))
    meta = front_matter(card)
    assert meta["datasets"] == ["glue/stsb"] and meta["license"] == "mit"
    assert "model-index" not in meta
    assert "No validation metrics were recorded." in card


@pytest.mark.parametrize("form, formula", [
    ({}, None), ({"reads": "normed"}, "LN(h + f(LN(h + x)) + x)"),
    ({"reads": "normed", "skip": "sum"}, "LN(h + x + f(LN(h + x)) + x)"),
    ({"reads": "input"}, "LN(h + f(x) + x)")])
def test_a_bottleneck_in_another_form_says_what_its_sublayer_computes(form, formula, tmp_path):
    d = make_adapter_dir(tmp_path / "pf", name="pf", architecture=form)
    rows = [line for line in render_model_card(json.loads((d / "manifest.json").read_text()))
            .splitlines() if line.startswith("| Form |")]
    assert rows == ([] if formula is None else [
        f"| Form | the sublayer computes {formula} (h: its output projection, x: its input, "
        "f: the bottleneck) |"])


def test_bundling_twice_changes_nothing(bundle_dir):
    before = {p.name: p.stat().st_mtime_ns for p in bundle_dir.iterdir()}
    make_bundle(bundle_dir)
    assert {p.name: p.stat().st_mtime_ns for p in bundle_dir.iterdir()} == before


def test_an_edited_card_is_rewritten(bundle_dir):
    original = (bundle_dir / "README.md").read_text()
    (bundle_dir / "README.md").write_text("my own notes\n")
    make_bundle(bundle_dir)
    assert (bundle_dir / "README.md").read_text() == original


def test_bundling_a_signed_folder_that_would_change_is_refused(signed_dir):
    (signed_dir / "README.md").write_text("edited\n")
    with pytest.raises(BundleError) as e:
        make_bundle(signed_dir)
    assert str(e.value) == (f"{signed_dir}: is signed already; bundling would change README.md "
                            "or manifest.json and invalidate model.sig")
    assert (signed_dir / "README.md").read_text() == "edited\n"


def test_bundle_refuses_a_bad_folder_from_the_cli(tmp_path):
    d = make_adapter_dir(tmp_path / "a")
    (d / "weights.pkl").write_bytes(b"x")
    result = CliRunner().invoke(cli, ["bundle", str(d)])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        f"error: {d / 'weights.pkl'}: pickle-based files are not allowed in a bundle "
        "(loading them can run code)")
    assert not (d / "README.md").exists()
