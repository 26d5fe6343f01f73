"""The record of verified pulls, `$HUB_HOME/pulled.json`: which reference was pulled from
where into which folder, and the registry key that verified it. A folder is usable as a pulled
adapter only once it is recorded here, and it is recorded only after it verified.

Attaching a pulled adapter accepts the key recorded for its folder (the registry's key for the
namespace at pull time) besides the trust store; see `registry_keys_for`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from hubcli.fsutil import atomic_write_text
from hubcli.settings import PULLED_FILE, home_path

MAX_RECORDS = 1000


@dataclass(frozen=True)
class PullRecord:
    repo_id: str
    version: str
    commit: str
    source: str  # the endpoint it came from
    path: str  # the verified folder
    key_id: str | None  # the key that verified its signature
    public_key: str | None  # PEM of that key when it came from the registry, not the trust store
    pulled: str  # ISO time

    @property
    def ref(self) -> str:
        return f"{self.repo_id}@{self.version}"


def _path() -> Path:
    return home_path(PULLED_FILE)


def load() -> list[PullRecord]:
    """Every record, oldest first; a lost or damaged file is an empty record (pulls again)."""
    try:
        data = json.loads(_path().read_text(encoding="utf-8"))
        return [PullRecord(**r) for r in data["adapters"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def add(record: PullRecord) -> None:
    """Record a verified pull, replacing any record of the same folder."""
    kept = [r for r in load() if r.path != record.path]
    data = {"version": 1, "adapters": [asdict(r) for r in (kept + [record])[-MAX_RECORDS:]]}
    atomic_write_text(_path(), json.dumps(data, indent=1) + "\n")


def find(repo_id: str, version: str | None) -> PullRecord | None:
    """The latest pull of `repo_id` at `version` (any version when None) whose folder is
    still there."""
    for r in reversed(load()):
        if r.repo_id == repo_id and version in (None, r.version) and Path(r.path).is_dir():
            return r
    return None


def registry_keys_for(directory: Path) -> list[bytes]:
    """The registry key that verified the pull into `directory`, if it was one (for attach)."""
    where = str(Path(directory).resolve())
    return [r.public_key.encode("ascii") for r in load()
            if r.path == where and r.public_key]
