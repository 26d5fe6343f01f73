"""What identifies a base model, torch-free: the content hash of its safetensors weights and
the hash of its tokenizer, as the client computes them when it loads a base and the registry
computes them when a base is pushed (one code for both), and the rules of a base folder the
registry hosts.

content hash = SHA-256 over every tensor of the checkpoint in name order, each fed as
    name NUL dtype NUL shape-json NUL byte-length(8, little endian) raw-bytes
so one model saved as one safetensors file, as shards, or as a .bin pickle hashes the same
(`hubcli.base.hashing` feeds pickles through torch into the same `hash_entries`).

tokenizer hash = SHA-256 over the vocabulary, the special tokens and the normaliser and
pre-tokeniser of the tokenizer's pipeline.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hubcli.errors import BundleError, ModelError
from hubcli.format.bundle_rules import PICKLE_SUFFIXES, README
from hubcli.format.safetensors_header import read_safetensors_header

HASH_PREFIX = "sha256:"
CONFIG = "config.json"
SHARD_INDEX = "model.safetensors.index.json"
TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# What a hosted base may hold besides its *.safetensors: configuration, tokenizer, model card.
BASE_FILES = (CONFIG, "generation_config.json", SHARD_INDEX, TOKENIZER_JSON, TOKENIZER_CONFIG,
              "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json",
              "merges.txt", "chat_template.jinja", README, ".gitattributes")
WEIGHTS_SUFFIX = ".safetensors"
# Code that `trust_remote_code` would run: a hosted base never carries any.
CODE_SUFFIXES = (".py", ".pyc", ".so", ".dll", ".dylib", ".sh", ".ipynb")
# The tokenizers whose hash the registry computes: the BERT WordPiece ones, for which the
# client hashes the same `tokenizer.json` (hubcli.base.tokenizer.FastTokenizer).
BERT_TOKENIZER_CLASSES = ("BertTokenizer", "BertTokenizerFast")


def feed(h, name: str, dtype: str, shape: list[int], data) -> None:
    h.update(f"{name}\0{dtype}\0{json.dumps(list(shape))}\0".encode())
    h.update(struct.pack("<Q", len(data)))
    h.update(data)


def hash_entries(entries: Iterable[tuple[str, str, list[int], object]]) -> str:
    """The content hash of (name, dtype, shape, raw bytes) entries given in name order."""
    h = hashlib.sha256()
    for name, dtype, shape, data in entries:
        feed(h, name, dtype, shape, data)
    return HASH_PREFIX + h.hexdigest()


def safetensors_header(path: Path) -> tuple[int, dict]:
    """(data start offset, tensor entries) of a safetensors file, fully checked.

    Raises:
        ModelError: the file is not well-formed safetensors.
    """
    try:
        tensors = read_safetensors_header(path)
    except BundleError as e:
        raise ModelError(f"base model weights unreadable: {e}") from None
    data_size = max((t["data_offsets"][1] for t in tensors.values()), default=0)
    return path.stat().st_size - data_size, tensors


def safetensors_entries(files: list[Path]) -> Iterator[tuple[str, str, list[int], bytes]]:
    """Every tensor of the files (shards of one checkpoint), in name order, read from disk.

    Raises:
        ModelError: a file is not well-formed safetensors.
    """
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


def safetensors_content_hash(files: list[Path]) -> str:
    """The content hash of a checkpoint stored as these safetensors files (uncached).

    Raises:
        ModelError: a file is not well-formed safetensors.
    """
    return hash_entries(safetensors_entries(sorted(files)))


def tokenizer_hash_of(vocab: dict[str, int], special_tokens: dict[str, Any],
                      pipeline_spec: dict[str, Any]) -> str:
    """The tokenizer hash from its vocabulary (with added tokens), special tokens by role, and
    the `tokenizer.json` document of its pipeline."""
    pipeline = {k: pipeline_spec.get(k) for k in ("normalizer", "pre_tokenizer")}
    doc = {"vocab": sorted(vocab.items()),
           "special_tokens": {k: str(v) for k, v in sorted(special_tokens.items())},
           "pipeline": pipeline}
    return HASH_PREFIX + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def special_tokens(folder: Path) -> dict[str, str]:
    """The special-token names of a tokenizer folder (special_tokens_map.json, else
    tokenizer_config.json), as transformers' `special_tokens_map` gives them."""
    found: dict[str, str] = {}
    for name in (TOKENIZER_CONFIG, "special_tokens_map.json"):  # the latter wins
        try:
            doc = json.loads((Path(folder) / name).read_text())
        except (OSError, ValueError):
            continue
        for key, value in doc.items() if isinstance(doc, dict) else ():
            if key.endswith("_token") and value is not None:
                found[key] = value["content"] if isinstance(value, dict) else str(value)
    return found


def is_bert_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds a tokenizer.json of a BERT tokenizer (hashed without
    transformers, the same way on both sides)."""
    try:
        config = json.loads((Path(folder) / TOKENIZER_CONFIG).read_text())
    except (OSError, ValueError):
        return False
    return (Path(folder) / TOKENIZER_JSON).is_file() and isinstance(config, dict) \
        and config.get("tokenizer_class") in BERT_TOKENIZER_CLASSES


def folder_tokenizer_hash(folder: Path) -> str | None:
    """The tokenizer hash of a BERT tokenizer folder, read with the `tokenizers` library as
    the client's FastTokenizer reads it; None for other tokenizers (the client hashes those
    through transformers, which the registry does not load).

    Raises:
        ModelError: tokenizer.json is not a tokenizer.
    """
    if not is_bert_tokenizer(folder):
        return None
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(Path(folder) / TOKENIZER_JSON))
    except Exception as e:  # the Rust parser's errors have no common Python type
        raise ModelError(f"{TOKENIZER_JSON} is not a tokenizer ({e})") from None
    return tokenizer_hash_of(backend.get_vocab(with_added_tokens=True), special_tokens(folder),
                             json.loads(backend.to_str()))


def check_base_names(names: Iterable[str]) -> None:
    """Only weights (*.safetensors), configuration, tokenizer files and a model card; at least
    config.json and one weights file.

    Raises:
        BundleError: naming the first file that is not allowed (pickles and code saying why),
            or what is missing.
    """
    names = sorted(names)
    allowed = f"*{WEIGHTS_SUFFIX}, {', '.join(BASE_FILES)}"
    for name in names:
        lower = name.lower()
        if "/" in name:
            raise BundleError("a base model's files lie at the top of its folder", path=name,
                              hint="move the file out of its sub-folder")
        if lower.endswith(PICKLE_SUFFIXES):
            raise BundleError("pickle-based weights are not allowed (loading them can run "
                              "code)", path=name,
                              hint="save with safe_serialization (model.save_pretrained "
                                   "writes model.safetensors)")
        if lower.endswith(CODE_SUFFIXES):
            raise BundleError("code files are not allowed in a base model (nothing here runs "
                              "trust_remote_code)", path=name, hint="remove the file")
        if not (name.endswith(WEIGHTS_SUFFIX) or name in BASE_FILES):
            raise BundleError("file not allowed in a base model", path=name,
                              hint=f"a base model holds only {allowed}")
    if CONFIG not in names:
        raise BundleError(f"a base model needs {CONFIG}", hint="save it with save_pretrained")
    if not any(n.endswith(WEIGHTS_SUFFIX) for n in names):
        raise BundleError("a base model needs its weights as *.safetensors",
                          hint="save with save_pretrained (safetensors is the default)")


def check_shard_index(folder: Path, names: Iterable[str]) -> None:
    """A sharded checkpoint's index names only shards that are present.

    Raises:
        BundleError: the index is not JSON, or names a missing shard.
    """
    if SHARD_INDEX not in names:
        return
    try:
        weight_map = json.loads((Path(folder) / SHARD_INDEX).read_text())["weight_map"]
        shards = set(weight_map.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise BundleError(f"{SHARD_INDEX} has no weight_map", path=SHARD_INDEX) from None
    missing = sorted(str(s) for s in shards if s not in set(names))
    if missing:
        raise BundleError(f"{SHARD_INDEX} names shards that are not here: "
                          f"{', '.join(missing)}", path=SHARD_INDEX,
                          hint="upload every shard with the index")
