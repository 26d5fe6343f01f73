"""The adapter directory written by `hub train --out DIR`: manifest.json + adapter.safetensors.

Loading reads only safetensors and JSON; nothing is ever unpickled.
"""

from __future__ import annotations

import platform
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hubcli import __version__

from hubcli.format import manifest as manifest_io
from hubcli.errors import AdapterError
from hubcli.fsutil import sha256_file, staged_dir


def file_entry(path: Path) -> dict[str, Any]:
    return {"path": path.name, "sha256": sha256_file(path), "size": path.stat().st_size}


def framework_versions() -> dict[str, str]:
    import torch
    import transformers

    return {"hubcli": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_adapter_dir(out: Path, manifest: dict[str, Any], tensors: dict) -> dict[str, Any]:
    """Write weights and manifest (with file digests) into `out`, all or nothing.

    Raises:
        ManifestError: the manifest is invalid (nothing is written).
    """
    from safetensors.torch import save_file

    with staged_dir(Path(out)) as tmp:
        weights = tmp / manifest_io.weights_file(manifest)
        save_file({k: v.detach().float().contiguous() for k, v in tensors.items()}, str(weights),
                  metadata={"format": "pt", "adapter": manifest["name"]})
        manifest = {**manifest, "files": [file_entry(weights)]}
        manifest_io.write(tmp, manifest)
    return manifest


def read_adapter_weights(directory: Path, file: str = manifest_io.WEIGHTS) -> dict:
    """The tensors of `directory/file` (adapter.safetensors, or a fusion's
    fusion.safetensors; safetensors only, no pickle).

    Raises:
        AdapterError: the file is missing or unreadable.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / file
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise AdapterError(f"{path}: missing", hint="the adapter directory is incomplete") from None
    except SafetensorError as e:
        raise AdapterError(f"{path}: not a readable safetensors file ({e})") from None


def safe_name(name: str) -> str:
    """`name` as the manifest's schema takes one: runs of other characters than letters,
    digits, '.', '_' and '-' as one '-', none at either end, at most 96 ("adapter" if
    nothing is left)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._") or "adapter"
    return cleaned[:96]
