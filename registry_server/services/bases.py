"""Base-model repositories: the base models adapters are trained on, hosted beside them.

A repository becomes a base with its first version when that version has no manifest.json
(a `save_pretrained` folder pushed with `upload_folder` or `hub push --base`). A base holds
only safetensors weights (sharded too), config.json, tokenizer files and a model card
(`hubcli.format.base_identity.check_base_names`: no pickles, no code). On each push the
content hash of the weights and the tokenizer hash are computed with the client's own code
(`hubcli.format.base_identity`) and indexed, so `hub pull` finds an adapter's base by the
content hash its manifest records. Versions are numbered by the registry: 1.0.0, 2.0.0, ...
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from hubcli.errors import BundleError, ModelError
from hubcli.format.base_identity import (CONFIG, WEIGHTS_SUFFIX, check_base_names,
                                         check_shard_index, folder_tokenizer_hash,
                                         safetensors_content_hash)
from hubcli.format.manifest import MANIFEST
from registry_server.errors import Rejected
from registry_server.models import BASE, Adapter, User, Version
from registry_server.services.search import visible

BASE_TAG = "base-model"


def is_base_push(session: Session, adapter: Adapter, names: set[str]) -> bool:
    """Whether a push to `adapter` is checked as a base: a base repository, or a repository's
    first version without a manifest.json."""
    if adapter.kind == BASE:
        return True
    if MANIFEST in names:
        return False
    versions = session.scalar(select(func.count(Version.id))
                              .where(Version.adapter_id == adapter.id))
    return not versions


def describe(adapter: Adapter, folder: Path, names: set[str]) -> dict:
    """The record of a base version (stored as its `manifest`), checked and hashed.

    Raises:
        Rejected: a file that is not allowed (pickles, code, anything else), no config.json
            or weights, a shard index naming missing shards, malformed safetensors or
            config.json.
    """
    try:
        check_base_names(names)
        check_shard_index(folder, names)
        config = _config(folder)
        weights = [folder / n for n in sorted(names) if n.endswith(WEIGHTS_SUFFIX)]
        content_hash = safetensors_content_hash(weights)
        tokenizer_hash = folder_tokenizer_hash(folder)
    except (BundleError, ModelError) as e:
        raise Rejected(f"not a base model: {_relative(e, folder)}", hint=e.hint) from None
    model_type = str(config.get("model_type", ""))[:32]
    return {"kind": BASE, "name": adapter.name, "model_type": model_type,
            "architectures": config.get("architectures") or [],
            "content_hash": content_hash, "tokenizer_hash": tokenizer_hash,
            "tags": [BASE_TAG] + ([model_type] if model_type else [])}


def _config(folder: Path) -> dict:
    """Raises: BundleError: config.json is not a JSON object."""
    try:
        config = json.loads((folder / CONFIG).read_text())
    except (OSError, ValueError) as e:
        raise BundleError(f"{CONFIG} is not JSON ({e})", path=CONFIG) from None
    if not isinstance(config, dict):
        raise BundleError(f"{CONFIG} must be a JSON object", path=CONFIG)
    return config


def _relative(error: Exception, folder: Path) -> str:
    return str(error).replace(f"{folder}/", "").replace(str(folder), "the upload")


def next_version(session: Session, adapter: Adapter) -> str:
    """The number of the next version: 1.0.0, 2.0.0, ... (deleted ones counted: never reused)."""
    count = session.scalar(select(func.count(Version.id))
                           .where(Version.adapter_id == adapter.id)) or 0
    return f"{count + 1}.0.0"


def same_content(session: Session, adapter: Adapter, digest: str) -> Version | None:
    """A live version of `adapter` with exactly these files: pushing them again is a no-op."""
    return session.scalars(select(Version).where(
        Version.adapter_id == adapter.id, Version.tree_digest == digest,
        Version.deleted_at.is_(None))).first()


def find_by_hash(session: Session, viewer: User | None, content_hash: str) -> Version | None:
    """The newest live, not yanked version of a base `viewer` may read whose weights have this
    content hash, or None."""
    return session.scalars(
        select(Version).join(Adapter, Adapter.id == Version.adapter_id)
        .where(Adapter.kind == BASE, Adapter.deleted_at.is_(None), visible(session, viewer),
               Version.base_model_hash == content_hash, Version.deleted_at.is_(None),
               Version.yanked_at.is_(None))
        .order_by(Version.created_at.desc(), Version.id.desc())).first()
