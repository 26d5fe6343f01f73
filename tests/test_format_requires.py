"""The format of composed adapters: `requires` in the manifest, fusion.safetensors in bundles."""

from __future__ import annotations

import json

import pytest
from safetensors.numpy import load_file

from factories import FUSION, make_adapter_dir, refresh_files, requirement
from hubcli.bundle import make_bundle
from hubcli.errors import BundleError, ManifestError
from hubcli.format.bundle_rules import check_bundle
from hubcli.format.spec import expected_tensors
from hubcli.format.vocab import METHODS


@pytest.fixture
def components(tmp_path):
    return [make_adapter_dir(tmp_path / n, name=n, seed=i)
            for i, n in enumerate(["sst2", "stsb", "mrpc"])]


def test_a_fusion_bundle_keeps_its_own_tensors_in_fusion_safetensors(tmp_path, components):
    d = make_adapter_dir(tmp_path / "fusion", name="mrpc-fusion", architecture=FUSION,
                         requires=[requirement(c) for c in components])
    manifest = make_bundle(d)
    assert sorted(p.name for p in d.iterdir()) == ["README.md", "fusion.safetensors",
                                                   "manifest.json"]
    assert check_bundle(d, require_readme=True)["requires"][2]["name"] == "mrpc"
    tensors = load_file(str(d / "fusion.safetensors"))
    # 2 layers x 2 placements x (query w+b, key w, value w+b) + a 4-tensor head
    assert len(tensors) == 2 * 2 * 5 + 4
    assert tensors["fusion.1.ffn_output.key.weight"].shape == (32, 32)
    assert "fusion.safetensors" in (d / "README.md").read_text()
    assert manifest["requires"][0]["manifest_sha256"] in (d / "README.md").read_text()


def test_old_manifests_without_requires_still_load(tmp_path):
    d = make_adapter_dir(tmp_path / "plain")
    m = check_bundle(d)
    assert "requires" not in m and m["architecture"]["type"] == "houlsby"
    assert METHODS == ("houlsby", "lora")  # a fusion is no method to train on its own


def test_a_fusion_without_two_requirements_is_refused(tmp_path, components):
    with pytest.raises(ManifestError, match="requires"):
        make_adapter_dir(tmp_path / "f", architecture=FUSION)
    with pytest.raises(ManifestError) as e:
        make_adapter_dir(tmp_path / "g", architecture=FUSION,
                         requires=[requirement(components[0])])
    assert e.value.pointer == "/requires"


@pytest.mark.parametrize("change, pointer", [
    (lambda r: r.pop("manifest_sha256"), "/requires/0"),
    (lambda r: r.update(manifest_sha256="abc"), "/requires/0/manifest_sha256"),
    (lambda r: r.update(version="latest"), "/requires/0/version"),
    (lambda r: r.pop("path"), "/requires/0"),  # neither ref nor path: nowhere to find it
])
def test_a_requirement_pins_name_version_and_digest(tmp_path, components, change, pointer):
    entry = requirement(components[0])
    change(entry)
    with pytest.raises(ManifestError) as e:
        make_adapter_dir(tmp_path / "stack", requires=[entry])
    assert e.value.pointer == pointer


def test_a_stacked_adapter_is_a_plain_method_with_requires(tmp_path, components):
    d = make_adapter_dir(tmp_path / "task", requires=[requirement(components[0], "alice/lang")])
    m = check_bundle(d)
    assert m["requires"][0]["ref"] == "alice/lang" and (d / "adapter.safetensors").is_file()


def test_both_weights_files_or_the_wrong_one_are_refused(tmp_path, components):
    d = make_adapter_dir(tmp_path / "fusion", architecture=FUSION,
                         requires=[requirement(c) for c in components[:2]])
    (d / "adapter.safetensors").write_bytes((components[0] / "adapter.safetensors").read_bytes())
    with pytest.raises(BundleError, match="both adapter.safetensors and fusion.safetensors"):
        check_bundle(d)
    (d / "fusion.safetensors").unlink()
    m = json.loads((d / "manifest.json").read_text())
    m["files"] = [{"path": "adapter.safetensors", "sha256": "0" * 64, "size": 0}]
    (d / "manifest.json").write_text(json.dumps(m))
    refresh_files(d)
    with pytest.raises(BundleError, match="architecture fusion keeps its weights in "
                                          "fusion.safetensors"):
        check_bundle(d)


def test_pickled_fusion_weights_are_refused(tmp_path, components):
    d = make_adapter_dir(tmp_path / "fusion", architecture=FUSION,
                         requires=[requirement(c) for c in components[:2]])
    (d / "fusion.pt").write_bytes(b"\x80\x04")
    with pytest.raises(BundleError, match="pickle"):
        check_bundle(d)


def test_fusion_tensor_layout_follows_layers_and_placement():
    m = {"base_model": {"hidden_size": 8, "num_layers": 3},
         "architecture": {**FUSION, "layers": [2], "placement": ["query"]},
         "head": {"type": "token_classification", "num_outputs": 3}}
    assert expected_tensors(m) == {
        "fusion.2.query.query.weight": (8, 8), "fusion.2.query.query.bias": (8,),
        "fusion.2.query.key.weight": (8, 8), "fusion.2.query.value.weight": (8, 8),
        "fusion.2.query.value.bias": (8,), "head.out.weight": (3, 8), "head.out.bias": (3,)}
