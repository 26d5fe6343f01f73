"""Content identity of a base model, independent of file format and sharding.

content hash = SHA-256 over every tensor of the checkpoint in name order, each fed as
    name NUL dtype NUL shape-json NUL byte-length(8, little endian) raw-bytes
so one model saved as one safetensors file, as shards, or as a .bin pickle hashes the same.
Safetensors files are hashed straight from disk (no torch); results are cached per
(path, size, mtime) so a second load does not re-hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from hubcli.errors import ModelError
from hubcli.fsutil import atomic_write_text, read_json_cache
from hubcli.settings import cache_dir

_TORCH_TO_ST = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
                "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                "bool": "BOOL"}


def _feed(h, name: str, dtype: str, shape: list[int], data) -> None:
    h.update(f"{name}\0{dtype}\0{json.dumps(list(shape))}\0".encode())
    h.update(struct.pack("<Q", len(data)))
    h.update(data)


def safetensors_header(path: Path) -> tuple[int, dict]:
    """(data start offset, tensor entries) of a safetensors file, fully checked.

    Raises:
        ModelError: the file is not well-formed safetensors.
    """
    from hubcli.format.safetensors_header import read_safetensors_header
    from hubcli.errors import BundleError

    try:
        tensors = read_safetensors_header(path)
    except BundleError as e:
        raise ModelError(f"base model weights unreadable: {e}") from None
    data_size = max((t["data_offsets"][1] for t in tensors.values()), default=0)
    return path.stat().st_size - data_size, tensors


def _safetensors_entries(files: list[Path]) -> Iterator[tuple[str, str, list[int], bytes]]:
    index: list[tuple[str, int, dict, int]] = []
    for k, path in enumerate(files):
        start, header = safetensors_header(path)
        index += [(name, k, meta, start) for name, meta in header.items()]
    fds = [os.open(path, os.O_RDONLY) for path in files]
    try:
        for name, k, meta, start in sorted(index, key=lambda e: e[0]):
            a, b = meta["data_offsets"]
            yield name, meta["dtype"], meta["shape"], os.pread(fds[k], b - a, start + a)
    finally:
        for fd in fds:
            os.close(fd)


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


def hash_entries(entries: Iterable[tuple[str, str, list[int], object]]) -> str:
    h = hashlib.sha256()
    for name, dtype, shape, data in entries:
        _feed(h, name, dtype, shape, data)
    return "sha256:" + h.hexdigest()


def content_hash(model_dir: Path) -> str:
    """The cached content hash of the model in `model_dir` ("sha256:<hex>")."""
    files = weight_files(Path(model_dir))
    key = json.dumps([[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files])
    cache = read_json_cache(_cache_file())
    if key in cache:
        return cache[key]
    if files[0].suffix == ".safetensors":
        digest = hash_entries(_safetensors_entries(files))
    else:
        digest = hash_entries(_torch_entries(files))
    cache[key] = digest
    _save_cache(cache)
    return digest


def tokenizer_hash(tokenizer) -> str:
    """SHA-256 over the vocabulary, normalisation and special tokens of a tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pipeline = {}
    if backend is not None:
        spec = json.loads(backend.to_str())
        pipeline = {k: spec.get(k) for k in ("normalizer", "pre_tokenizer")}
    doc = {"vocab": sorted(tokenizer.get_vocab().items()),
           "special_tokens": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
           "pipeline": pipeline}
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _cache_file() -> Path:
    return cache_dir() / "base_hashes.json"


def _save_cache(cache: dict[str, str]) -> None:
    atomic_write_text(_cache_file(), json.dumps(cache, indent=1))
