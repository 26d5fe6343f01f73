"""Content identity of a base model, independent of file format and sharding: the hashes
themselves are defined (torch-free) in `hubcli.format.base_identity`, which the registry uses
too; here the client hashes pickled checkpoints through torch and caches results per
(path, size, mtime) so a second load does not re-hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from hubcli.errors import ModelError
from hubcli.format.base_identity import (hash_entries, safetensors_content_hash,
                                         tokenizer_hash_of)
from hubcli.fsutil import atomic_write_text, read_json_cache
from hubcli.settings import cache_dir

_TORCH_TO_ST = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
                "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                "bool": "BOOL"}


def _torch_entries(files: list[Path]) -> Iterator[tuple[str, str, list[int], bytes]]:
    import torch

    state: dict = {}
    for path in files:
        state.update(torch.load(path, map_location="cpu", weights_only=True))
    for name in sorted(state):
        t = state[name].contiguous()
        dtype = _TORCH_TO_ST[str(t.dtype).removeprefix("torch.")]
        yield name, dtype, list(t.shape), t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def weight_files(model_dir: Path) -> list[Path]:
    """The checkpoint's weight files: safetensors if any, else PyTorch .bin files.

    Raises:
        ModelError: the folder has no weights.
    """
    files = sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("pytorch_model*.bin"))
    if not files:
        raise ModelError(f"{model_dir}: no model weights (*.safetensors or pytorch_model*.bin)",
                         hint="point at a Hugging Face model folder")
    return files


def content_hash(model_dir: Path) -> str:
    """The cached content hash of the model in `model_dir` ("sha256:<hex>")."""
    files = weight_files(Path(model_dir))
    key = json.dumps([[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files])
    cache = read_json_cache(_cache_file())
    if key in cache:
        return cache[key]
    if files[0].suffix == ".safetensors":
        digest = safetensors_content_hash(files)
    else:
        digest = hash_entries(_torch_entries(files))
    cache[key] = digest
    _save_cache(cache)
    return digest


def tokenizer_hash(tokenizer) -> str:
    """SHA-256 over the vocabulary, normalisation and special tokens of a tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    return tokenizer_hash_of(tokenizer.get_vocab(), tokenizer.special_tokens_map, spec)


def _cache_file() -> Path:
    return cache_dir() / "base_hashes.json"


def _save_cache(cache: dict[str, str]) -> None:
    atomic_write_text(_cache_file(), json.dumps(cache, indent=1))
