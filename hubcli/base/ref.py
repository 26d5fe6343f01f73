"""Finding a base model by its content hash, torch-free: the packaged default, then the bases
loaded on this machine before (hubcli.base.load.known_bases). Also turns what a user types
for a base (`--base minilm`) into the content hash the registry indexes."""

from __future__ import annotations

from pathlib import Path

from hubcli.base.load import DEFAULT_BASE_NAME, find_base, known_bases, packaged_base_path
from hubcli.base.hashing import content_hash
from hubcli.errors import UsageError

HASH_PREFIX = "sha256:"


def packaged_base_hash() -> str:
    """Content hash of the packaged default base (hashed once, then cached)."""
    return content_hash(packaged_base_path())


def locate_base(content_hash_: str) -> str | None:
    """A local folder holding the base with this content hash, or None."""
    if content_hash_ == packaged_base_hash():
        return str(packaged_base_path())
    return find_base(content_hash_)


def local_bases() -> dict[str, str]:
    """content hash -> name of every base this machine has: the packaged one and those used."""
    bases = {h: entry["name"] for h, entry in known_bases().items()}
    return {packaged_base_hash(): DEFAULT_BASE_NAME, **bases}


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
    hits = {h: n for h, n in local_bases().items() if value.lower() in n.lower()}
    if len(hits) > 1:
        raise UsageError(f"--base {value!r} matches several local bases: "
                         f"{', '.join(sorted(set(hits.values())))}",
                         hint="give more of the name, or the content hash (sha256:...)")
    if hits:
        return next(iter(hits)), None
    return None, value
