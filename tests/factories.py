"""Tiny adapter folders for tests, built without torch (numpy + safetensors).

    from factories import make_adapter_dir
    d = make_adapter_dir(tmp_path / "sst2-adapter", name="sst2-adapter")

Defaults: hidden size 32, 2 layers, bottleneck 4, a sequence_classification head with 2 labels,
adapters after both sublayers of every layer and LayerNorm deltas. Keyword overrides replace
top-level manifest fields; a dict value is merged into the default dict (e.g.
`architecture={"bottleneck": 8}`), unless it names another method (`architecture=LORA`). The
weights always match the final manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from hubcli.format import manifest as manifest_io
from hubcli.format.spec import expected_tensors

BASE_PARAMETERS = 1_000_000
LORA = {"type": "lora", "rank": 4, "alpha": 8.0, "placement": ["query", "value"],
        "layers": [0, 1], "layernorm": "frozen"}
FUSION = {"type": "fusion", "placement": ["attention_output", "ffn_output"], "layers": [0, 1],
          "layernorm": "frozen"}


def requirement(directory: Path, ref: str | None = None) -> dict[str, Any]:
    """A `requires` entry pinning the adapter folder `directory` (by path unless `ref`)."""
    manifest = json.loads((Path(directory) / "manifest.json").read_text())
    where = {"ref": ref} if ref else {"path": str(Path(directory).resolve())}
    return {"name": manifest["name"], "version": manifest["version"],
            "manifest_sha256": hashlib.sha256((Path(directory) / "manifest.json").read_bytes()
                                              ).hexdigest(), **where}


def default_manifest(hidden: int = 32, num_layers: int = 2, bottleneck: int = 4) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "tiny-adapter",
        "version": "1.0.0",
        "description": "A tiny adapter for tests.",
        "license": "apache-2.0",
        "tags": ["sentiment"],
        "task": "classification",
        "head": {"type": "sequence_classification", "num_outputs": 2,
                 "labels": ["negative", "positive"], "pooling": "mean"},
        "base_model": {"name": "tiny-bert", "revision": None,
                       "content_hash": "sha256:" + "ab" * 32,
                       "tokenizer_hash": "sha256:" + "cd" * 32, "model_type": "bert",
                       "hidden_size": hidden, "num_layers": num_layers,
                       "num_parameters": BASE_PARAMETERS},
        "architecture": {"type": "houlsby", "bottleneck": bottleneck,
                         "placement": ["attention_output", "ffn_output"],
                         "non_linearity": "gelu", "init_scale": 0.001,
                         "layers": list(range(num_layers)), "layernorm": "delta"},
        "parameters": {},
        "training": {"epochs": 2, "best_epoch": 2, "learning_rate": 0.001, "batch_size": 8,
                     "max_length": 64, "seed": 0,
                     "train_data": {"name": "sst2_train.tsv", "format": "tsv",
                                    "sha256": "1" * 64, "examples": 100},
                     "validation_data": {"name": "sst2_dev.tsv", "format": "tsv",
                                         "sha256": "2" * 64, "examples": 20}},
        "metrics": {"primary": "accuracy",
                    "validation": [{"epoch": 1, "accuracy": 0.7, "loss": 0.6},
                                   {"epoch": 2, "accuracy": 0.85, "loss": 0.4}],
                    "best": {"accuracy": 0.85, "loss": 0.4}},
        "files": [],
        "created": "2026-01-01T00:00:00Z",
        "framework": {"hubcli": "0.1.0"},
    }


def file_entry(directory: Path, name: str) -> dict[str, Any]:
    data = (Path(directory) / name).read_bytes()
    return {"path": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def refresh_files(directory: Path) -> dict[str, Any]:
    """Recompute the digests and sizes in manifest.json's "files" after a test edited a file."""
    manifest = json.loads((Path(directory) / "manifest.json").read_text())
    manifest["files"] = [file_entry(directory, f["path"]) for f in manifest["files"]]
    (Path(directory) / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _parameters(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    count = {p: sum(math.prod(s) for n, s in shapes.items() if n.startswith(p + "."))
             for p in ("adapters", "layernorm", "head", "fusion")}
    trainable = sum(count.values())
    return {"trainable": trainable, **{k: v for k, v in count.items() if v or k != "fusion"},
            "base": BASE_PARAMETERS, "share": trainable / BASE_PARAMETERS}


def make_adapter_dir(path: Path, *, hidden: int = 32, num_layers: int = 2, bottleneck: int = 4,
                     seed: int = 0, scale: float = 0.01, **overrides: Any) -> Path:
    """Write a schema-valid adapter folder (manifest.json + its weights file) at `path`, its
    weights normal with std `scale`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    manifest = default_manifest(hidden, num_layers, bottleneck)
    for key, value in overrides.items():
        # an architecture of another method replaces the default one instead of merging into it
        merge = (isinstance(value, dict) and isinstance(manifest.get(key), dict)
                 and value.get("type", manifest[key].get("type")) == manifest[key].get("type"))
        manifest[key] = {**manifest[key], **value} if merge else value
    shapes = expected_tensors(manifest)
    rng = np.random.default_rng(seed)
    weights = manifest_io.weights_file(manifest)
    save_file({n: (rng.standard_normal(s) * scale).astype(np.float32) for n, s in shapes.items()},
              str(path / weights))
    if not manifest["parameters"]:
        manifest["parameters"] = _parameters(shapes)
    manifest["files"] = [file_entry(path, weights)]
    manifest_io.write(path, manifest)
    return path


def make_signed_bundle(path: Path, *, key_path: Path | None = None, **overrides: Any) -> Path:
    """`make_adapter_dir`, bundled and signed (with `hub keygen`'s key unless `key_path`)."""
    from hubcli.bundle import make_bundle
    from hubcli.signing.sign import sign_bundle

    make_adapter_dir(path, **overrides)
    make_bundle(path)
    sign_bundle(path, key_path)
    return path


def close(a, b) -> bool:
    """Predictions equal up to float noise (1e-5)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return abs(a - b) <= 1e-5
    return a == b
