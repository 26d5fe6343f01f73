"""manifest.json: build, validate against `schemas/manifest.schema.json` (package data), read and write.

Torch-free: the registry server validates manifests with this module.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from hubcli.format import safejson
from hubcli.errors import ManifestError
from hubcli.fsutil import atomic_write_text, is_dir, is_too_long

MANIFEST = "manifest.json"
WEIGHTS = "adapter.safetensors"
# An AdapterFusion's own tensors (fusion layers and head); its components' stay in theirs.
FUSION_WEIGHTS = "fusion.safetensors"
WEIGHTS_FILES = (WEIGHTS, FUSION_WEIGHTS)
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


@lru_cache(maxsize=None)
def _validator(name: str):
    import jsonschema

    schema = json.loads((SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate(manifest: Any, *, path: str | None = None) -> None:
    """Check `manifest` against the schema.

    Raises:
        ManifestError: naming the first offending field (as a JSON pointer) and value.
    """
    errors = sorted(_validator("manifest.schema.json").iter_errors(manifest),
                    key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        pointer = "/" + "/".join(str(p) for p in err.absolute_path)
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ManifestError(f"{err.message}{more}", path=path, pointer=pointer,
                            hint="fix the field, or re-create the adapter with `hub train`")


def read(directory: Path) -> dict[str, Any]:
    """Read and validate `directory/manifest.json`.

    Raises:
        ManifestError: no such folder (or a file; or a name too long to be one), missing, not
            JSON (with line and column), or invalid.
    """
    path = Path(directory) / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        if not isinstance(e, FileNotFoundError | NotADirectoryError) and not is_too_long(e):
            raise  # a read that failed (permissions, I/O): not a folder missing
        hint = "point at a folder written by `hub train --out`"
        folder = Path(directory)
        if is_dir(folder):
            raise ManifestError("no manifest.json here", path=str(path), hint=hint) from None
        raise ManifestError("not a folder" if not is_too_long(e) and folder.exists()
                            else "no such adapter folder", path=str(folder), hint=hint) from None
    except UnicodeDecodeError:
        raise ManifestError("not UTF-8 text", path=str(path)) from None
    try:
        manifest = safejson.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}",
                            path=str(path)) from None
    except ValueError as e:
        raise ManifestError(f"not valid JSON: {e}", path=str(path)) from None
    validate(manifest, path=str(path))
    return manifest


def dumps(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def write(directory: Path, manifest: dict[str, Any]) -> None:
    """Validate, then atomically write `directory/manifest.json`.

    Raises:
        ManifestError: the manifest is invalid (nothing is written).
    """
    validate(manifest, path=str(Path(directory) / MANIFEST))
    atomic_write_text(Path(directory) / MANIFEST, dumps(manifest))


def weights_file(manifest: dict[str, Any]) -> str:
    """The weights file an adapter folder holds: fusion.safetensors for a fusion, else
    adapter.safetensors."""
    return FUSION_WEIGHTS if manifest["architecture"].get("type") == "fusion" else WEIGHTS
