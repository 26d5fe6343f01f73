"""hub bundle's checks: allowed files, manifest digests, and the safetensors header read
without torch."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from factories import make_adapter_dir, refresh_files
from safetensors.numpy import load_file, save_file

from hubcli.bundle import ALLOWED_FILES, check_bundle, read_safetensors_header
from hubcli.errors import BundleError, ManifestError


def write_raw(path, header: dict, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def f32(begin: int, end: int, shape: list[int]) -> dict:
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, end]}


@pytest.fixture
def adapter(tmp_path):
    return make_adapter_dir(tmp_path / "a")


# --- read_safetensors_header ------------------------------------------------------------------

def test_header_of_a_real_file_matches_safetensors_own_reader(adapter):
    header = read_safetensors_header(adapter / "adapter.safetensors")
    tensors = load_file(adapter / "adapter.safetensors")
    assert set(header) == set(tensors)
    for name, array in tensors.items():
        assert header[name]["dtype"] == "F32"
        assert header[name]["shape"] == array.shape
    assert header["adapters.0.attention_output.down.weight"]["shape"] == (4, 32)


def test_header_accepts_metadata_and_zero_sized_tensors(tmp_path):
    path = tmp_path / "w.safetensors"
    write_raw(path, {"__metadata__": {"format": "pt"}, "a": f32(0, 8, [2]),
                     "empty": f32(8, 8, [0, 3])}, b"\0" * 8)
    assert read_safetensors_header(path) == {
        "a": {"dtype": "F32", "shape": (2,), "data_offsets": (0, 8)},
        "empty": {"dtype": "F32", "shape": (0, 3), "data_offsets": (8, 8)}}


@pytest.mark.parametrize("header,data,message", [
    ({"a": f32(0, 8, [2]), "b": f32(12, 16, [1])}, b"\0" * 16,
     "tensor 'b': data_offsets [12, 16] leaves a gap before it (expected to start at 8)"),
    ({"a": f32(0, 8, [2]), "b": f32(4, 8, [1])}, b"\0" * 8,
     "tensor 'b': data_offsets [4, 8] overlaps the previous tensor (expected to start at 8)"),
    ({"a": f32(0, 8, [2])}, b"\0" * 12, "tensors cover 8 bytes but the data buffer holds 12"),
    ({"a": f32(0, 8, [3])}, b"\0" * 8,
     "tensor 'a': data_offsets [0, 8] span 8 bytes, but F32 [3] needs 12"),
    ({"a": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4,
     "tensor 'a': unknown dtype 'F99'"),
    ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4,
     "tensor 'a': shape [-1] is not a list of non-negative integers"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4,
     "tensor 'a': data_offsets [4, 0] is not a [begin, end] pair with begin <= end"),
    ({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4,
     "tensor 'a': entry must have exactly the keys dtype, shape and data_offsets"),
    ({"__metadata__": {"n": 1}}, b"", "__metadata__ must map strings to strings"),
])
def test_malformed_headers_are_refused_with_the_reason(tmp_path, header, data, message):
    path = tmp_path / "w.safetensors"
    write_raw(path, header, data)
    with pytest.raises(BundleError) as e:
        read_safetensors_header(path)
    assert str(e.value) == f"{path}: {message}"


def test_duplicate_names_too_short_files_and_absurd_header_lengths(tmp_path):
    path = tmp_path / "w.safetensors"
    raw = b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {}}'
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    with pytest.raises(BundleError, match="header is not valid JSON: duplicate tensor name 'a'"):
        read_safetensors_header(path)
    path.write_bytes(b"\1\2\3")
    with pytest.raises(BundleError, match="3 bytes is too short for a safetensors file"):
        read_safetensors_header(path)
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(BundleError, match=f"header length {1 << 40} exceeds the limit"):
        read_safetensors_header(path)
    path.write_bytes(struct.pack("<Q", 100) + b"{}")
    with pytest.raises(BundleError, match="header length 100 runs past the end of the 10-byte"):
        read_safetensors_header(path)
    path.write_bytes(struct.pack("<Q", 2) + b"[]")
    with pytest.raises(BundleError, match="header is not a JSON object"):
        read_safetensors_header(path)


# --- tensors against the manifest's architecture -----------------------------------------------

def rewrite_weights(directory, change) -> None:
    tensors = load_file(directory / "adapter.safetensors")
    change(tensors)
    save_file(tensors, str(directory / "adapter.safetensors"))
    refresh_files(directory)


@pytest.mark.parametrize("change,message", [
    (lambda t: t.pop("head.out.bias"),
     "missing tensor 'head.out.bias', expected by the manifest's architecture"),
    (lambda t: t.update(extra=np.zeros(3, np.float32)),
     "unexpected tensor 'extra', not part of the manifest's architecture"),
    (lambda t: t.update({"adapters.1.ffn_output.down.weight": np.zeros((8, 32), np.float32)}),
     "tensor 'adapters.1.ffn_output.down.weight' has shape [8, 32], expected [4, 32]"),
    (lambda t: t.update({"head.out.bias": np.zeros(2, np.float16)}),
     "tensor 'head.out.bias' has dtype F16, expected F32"),
])
def test_weights_must_hold_exactly_the_architectures_tensors(adapter, change, message):
    rewrite_weights(adapter, change)
    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == f"{adapter / 'adapter.safetensors'}: {message}"


def test_missing_tensors_are_counted(adapter):
    rewrite_weights(adapter, lambda t: [t.pop(n) for n in list(t) if n.startswith("layernorm.")])
    with pytest.raises(BundleError, match=r"missing tensor 'layernorm.embeddings.bias_delta' "
                                          r"\(and 9 more\)"):
        check_bundle(adapter)


# --- files ----------------------------------------------------------------------------------------

def test_a_fresh_adapter_folder_passes_and_returns_its_manifest(adapter):
    manifest = check_bundle(adapter)
    assert manifest["name"] == "tiny-adapter"
    assert ALLOWED_FILES == ("manifest.json", "adapter.safetensors", "fusion.safetensors",
                             "README.md", "model.sig")


@pytest.mark.parametrize("name,message", [
    ("notes.txt", "file not allowed in a bundle"),
    (".DS_Store", "file not allowed in a bundle"),
    ("optimizer.pt", "pickle-based files are not allowed in a bundle (loading them can run code)"),
    ("model.PKL", "pickle-based files are not allowed in a bundle (loading them can run code)"),
])
def test_only_allowed_file_names(adapter, name, message):
    (adapter / name).write_bytes(b"x")
    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == f"{adapter / name}: {message}"
    assert "a bundle holds only manifest.json, adapter.safetensors, fusion.safetensors, README.md, model.sig" in \
        e.value.hint


def test_symlinks_and_sub_folders_are_refused(adapter, tmp_path):
    outside = tmp_path / "secret"
    outside.write_text("x")
    os.symlink(outside, adapter / "README.md")
    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == f"{adapter / 'README.md'}: symlinks are not allowed in a bundle"
    (adapter / "README.md").unlink()
    (adapter / "extra").mkdir()
    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == f"{adapter / 'extra'}: sub-folders are not allowed in a bundle"


def test_required_files(adapter, tmp_path):
    with pytest.raises(BundleError) as e:
        check_bundle(adapter, require_readme=True)
    assert str(e.value) == f"{adapter}: README.md is missing"
    assert e.value.hint == "run `hub bundle DIR` to write the model card"
    (adapter / "README.md").write_text("x")
    with pytest.raises(BundleError, match="model.sig is missing"):
        check_bundle(adapter, require_signature=True)
    (adapter / "adapter.safetensors").unlink()
    with pytest.raises(BundleError, match="adapter.safetensors is missing"):
        check_bundle(adapter)
    with pytest.raises(BundleError, match="not a directory"):
        check_bundle(tmp_path / "nowhere")


def test_manifest_digests_and_sizes_must_match(adapter):
    weights = adapter / "adapter.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    recorded = json.loads((adapter / "manifest.json").read_text())["files"][0]["sha256"]
    import hashlib

    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == (f"{weights}: sha256 is {hashlib.sha256(data).hexdigest()}, "
                            f"but manifest.json says {recorded}")
    weights.write_bytes(bytes(data) + b"\0")
    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == f"{weights}: size is {len(data) + 1} bytes, but manifest.json says " \
                           f"{len(data)}"


def test_files_list_must_describe_the_folder(adapter):
    (adapter / "README.md").write_text("# card\n")
    with pytest.raises(BundleError) as e:
        check_bundle(adapter)
    assert str(e.value) == f"{adapter / 'manifest.json'}: README.md is not listed in " \
                           'manifest.json "files"'
    manifest = json.loads((adapter / "manifest.json").read_text())
    manifest["files"].append(dict(manifest["files"][0]))
    (adapter / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="lists adapter.safetensors twice"):
        check_bundle(adapter)
    manifest["files"][1]["path"] = "model.sig"
    (adapter / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="lists model.sig, which is not a bundle file"):
        check_bundle(adapter)


def test_invalid_manifests_are_manifest_errors(adapter):
    manifest = json.loads((adapter / "manifest.json").read_text())
    manifest["architecture"]["bottleneck"] = 0
    (adapter / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="at /architecture/bottleneck: 0 is less than"):
        check_bundle(adapter)
