"""The backup archive: an uncompressed tar file (blobs are compressed tensors already).

    tables/<table>.jsonl   one JSON object per row, keyed by column name, in primary-key order
    blobs/<sha256>         each blob the rows name, its bytes as stored
    backup.json            {"format": 1, "revision": <alembic revision>, "dialect": ...,
                            "created_at": ..., "tables": {table: rows}, "blobs": {sha256: size}}

Values are encoded by column type so an archive moves between SQLite and PostgreSQL:
datetimes as ISO 8601 in UTC, bytes as base64; JSON columns stay JSON; the rest is JSON already.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, DateTime, Engine, LargeBinary, Row, Table

import registry_server.ui.models  # noqa: F401  (the web UI's tables join the shared metadata)
from hubcli.errors import BackupError
from registry_server import migrate
from registry_server.models import Base, as_utc

FORMAT = 1
MANIFEST = "backup.json"
TABLES = "tables"
BLOBS = "blobs"
# Tables whose rows name blobs: (table, digest column, size column). `blobs` rows are never
# deleted, so `gc` cannot remove their blobs; `lfs_uploads` may name blobs of uploads that were
# never committed, which `gc` removes after its grace period.
BLOB_COLUMNS = (("blobs", "sha256", "size"), ("lfs_uploads", "oid", "size"))
SHA256 = re.compile(r"[0-9a-f]{64}")
PROGRESS_SECONDS = 1.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Summary:
    """What a backup wrote or a restore put back."""

    archive: str
    revision: str
    tables: dict[str, int]
    blobs: int
    blob_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def schema_revision(engine: Engine) -> str:
    """The database's schema revision, which must be the code's (the tables are read and
    written through the code's models).

    Raises:
        BackupError: the database is not at the code's revision.
    """
    database, code = migrate.current(engine), migrate.head()
    if database != code:
        raise BackupError(f"the database is at schema revision {database or '(none)'}, not "
                          f"{code}", hint="run `hub-registry migrate` first")
    return code


def counter(progress: Progress, what: str, total: int) -> Callable[[int], None]:
    """A function of the count done that reports `what: done/total` at most once a second,
    and at the end."""
    last = time.monotonic()

    def done(n: int) -> None:
        nonlocal last
        if time.monotonic() - last >= PROGRESS_SECONDS or n == total:
            progress(f"{what}: {n}/{total}")
            last = time.monotonic()

    return done


def tables() -> list[Table]:
    """Every table, parents before children (the insert order)."""
    return list(Base.metadata.sorted_tables)


def table_member(table: Table) -> str:
    return f"{TABLES}/{table.name}.jsonl"


def blob_member(sha256: str) -> str:
    return f"{BLOBS}/{sha256}"


def deferred_columns(table: Table) -> list[Column]:
    """Foreign keys that close a cycle (`adapters.latest_version_id` -> versions): restore
    fills them in once every table is loaded."""
    return [fk.parent for fk in table.foreign_keys if fk.constraint.use_alter]


def encode_row(table: Table, row: Row) -> dict[str, Any]:
    return {c.name: _encode(c, value) for c, value in zip(table.columns, row)}


def decode_row(table: Table, data: dict[str, Any]) -> dict[str, Any]:
    """Raises: KeyError: a column is missing. ValueError: a value of the wrong form."""
    return {c.name: _decode(c, data[c.name]) for c in table.columns}


def _encode(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, DateTime):
        return as_utc(value).isoformat()
    if isinstance(column.type, LargeBinary):
        return base64.b64encode(value).decode("ascii")
    return value


def _decode(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, DateTime):
        return as_utc(datetime.fromisoformat(value))
    if isinstance(column.type, LargeBinary):
        return base64.b64decode(value, validate=True)
    return value
