"""Read and check a safetensors header without torch and without reading any tensor data.

Layout (https://github.com/huggingface/safetensors): 8-byte little-endian header length N,
N bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?}`,
then the data buffer, which the tensors must cover exactly, without gaps or overlaps.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

from hubcli.format import safejson
from hubcli.format.spec import TENSOR_DTYPE, Shape
from hubcli.errors import BundleError

# An adapter for a 24-layer model has a few hundred tensors, about 40 KB of header; a far
# larger header is either corrupt or an attempt to make the reader allocate memory.
MAX_HEADER_BYTES = 1 << 20
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
METADATA_KEY = "__metadata__"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate tensor name {key!r}")
        seen[key] = value
    return seen


def _load_header(path: Path) -> tuple[dict[str, Any], int]:
    """The parsed header JSON and the size of the data buffer behind it."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise BundleError(f"{size} bytes is too short for a safetensors file", path=str(path))
        (n,) = struct.unpack("<Q", prefix)
        if n > MAX_HEADER_BYTES:
            raise BundleError(f"header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes",
                              path=str(path))
        if n > size - 8:
            raise BundleError(f"header length {n} runs past the end of the {size}-byte file",
                              path=str(path))
        raw = f.read(n)
    try:
        header = safejson.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise BundleError(f"header is not valid JSON: {e}", path=str(path)) from None
    if not isinstance(header, dict):
        raise BundleError("header is not a JSON object", path=str(path))
    return header, size - 8 - n


def _entry(name: str, value: Any, path: Path) -> dict[str, Any]:
    """One tensor's header entry, type-checked, with its byte length checked against its shape."""
    def bad(why: str) -> BundleError:
        return BundleError(f"tensor {name!r}: {why}", path=str(path))

    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data_offsets"}:
        raise bad("entry must have exactly the keys dtype, shape and data_offsets")
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise bad(f"unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"shape {shape!r} is not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int and o >= 0 for o in offsets) or offsets[0] > offsets[1]):
        raise bad(f"data_offsets {offsets!r} is not a [begin, end] pair with begin <= end")
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise bad(f"data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, "
                  f"but {dtype} {shape} needs {expected}")
    return {"dtype": dtype, "shape": tuple(shape), "data_offsets": tuple(offsets)}


def read_safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """Tensor name -> {"dtype", "shape" (tuple), "data_offsets" (begin, end)}, fully checked:
    sane header length, valid JSON without duplicate names, known dtypes, byte spans that match
    the shapes, and data offsets that tile the data buffer contiguously up to the end of file.

    Raises:
        BundleError: naming the file and the offending tensor or field.
    """
    path = Path(path)
    header, data_size = _load_header(path)
    metadata = header.pop(METADATA_KEY, {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise BundleError(f"{METADATA_KEY} must map strings to strings", path=str(path))
    tensors = {name: _entry(name, value, path) for name, value in header.items()}
    position = 0
    for name, t in sorted(tensors.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = t["data_offsets"]
        if begin != position:
            why = "overlaps the previous tensor" if begin < position else "leaves a gap before it"
            raise BundleError(f"tensor {name!r}: data_offsets {[begin, end]} {why} "
                              f"(expected to start at {position})", path=str(path))
        position = end
    if position != data_size:
        raise BundleError(f"tensors cover {position} bytes but the data buffer holds {data_size}",
                          path=str(path))
    return tensors


def check_tensors(header: dict[str, dict[str, Any]], expected: dict[str, Shape],
                  path: Path) -> None:
    """Compare a parsed header with the tensors the manifest implies.

    Raises:
        BundleError: a missing, unexpected, wrongly typed or wrongly shaped tensor.
    """
    hint = "the weights do not match manifest.json; re-create the adapter with `hub train`"
    missing = sorted(set(expected) - set(header))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise BundleError(f"missing tensor {missing[0]!r}{more}, expected by the manifest's "
                          "architecture", path=str(path), hint=hint)
    extra = sorted(set(header) - set(expected))
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise BundleError(f"unexpected tensor {extra[0]!r}{more}, not part of the manifest's "
                          "architecture", path=str(path), hint=hint)
    for name in sorted(expected):
        dtype, shape = header[name]["dtype"], header[name]["shape"]
        if dtype != TENSOR_DTYPE:
            raise BundleError(f"tensor {name!r} has dtype {dtype}, expected {TENSOR_DTYPE}",
                              path=str(path), hint=hint)
        if shape != tuple(expected[name]):
            raise BundleError(f"tensor {name!r} has shape {list(shape)}, "
                              f"expected {list(expected[name])}", path=str(path), hint=hint)
