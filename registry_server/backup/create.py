"""Writing a backup: the rows of one read transaction, then the blobs they name.

Consistency: every table is read in one read-only transaction (REPEATABLE READ on PostgreSQL;
an explicit BEGIN on SQLite, whose WAL journal gives a reader a snapshot), so the rows agree
with each other whatever is pushed meanwhile. Blobs are copied after the transaction ends: they
are content-addressed and immutable, and `gc` never deletes a blob that has a `blobs` row, so
the copy matches the snapshot even while the registry serves. The one exception is an LFS
upload never committed whose blob `gc` removes in between: its blob is left out, which is the
state `gc` leaves anyway.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from sqlalchemy import Connection, Engine, select

from hubcli.errors import BackupError
from hubcli.fsutil import atomic_writer
from registry_server.backup import archive
from registry_server.backup.archive import Progress
from registry_server.storage import BlobStorage


def write_backup(engine: Engine, storage: BlobStorage, out: Path, *,
                 progress: Progress | None = None) -> archive.Summary:
    """Write a backup of the database behind `engine` and its blobs to the tar file `out`
    (atomically: a failure leaves no file, or the previous one, behind).

    Raises:
        BackupError: the database is not at the code's schema revision, a blob named by a
            `blobs` row is missing from storage, or `out` cannot be written.
    """
    progress = progress or (lambda _message: None)
    revision = archive.schema_revision(engine)
    try:
        return _write(engine, storage, out, revision, progress)
    except OSError as e:
        raise BackupError(f"backup to {out} failed: {e.strerror or e}", path=str(out),
                          hint="write it to a folder with room for it, and check that the "
                               "blob storage is readable") from None


def _write(engine: Engine, storage: BlobStorage, out: Path, revision: str,
           progress: Progress) -> archive.Summary:
    with atomic_writer(out) as f, tarfile.open(fileobj=f, mode="w") as tar:
        with _snapshot(engine) as connection:
            counts, named = _dump_tables(connection, tar, progress)
        blobs = _copy_blobs(storage, named, tar, progress)
        manifest = {"format": archive.FORMAT, "revision": revision,
                    "dialect": engine.dialect.name,
                    "created_at": datetime.now(timezone.utc).isoformat(),
                    "tables": counts, "blobs": blobs}
        _add_file(tar, archive.MANIFEST, io.BytesIO(json.dumps(manifest, indent=1).encode()))
    return archive.Summary(str(out), revision, counts, len(blobs), sum(blobs.values()))


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection whose reads all see one moment of the database."""
    if engine.dialect.name == "postgresql":
        options = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
        with engine.connect().execution_options(**options) as connection:
            yield connection
            connection.rollback()
        return
    with engine.connect() as connection:
        # pysqlite opens a transaction only before a write; reads need an explicit one.
        connection.exec_driver_sql("BEGIN")
        yield connection
        connection.rollback()


def _dump_tables(connection: Connection, tar: tarfile.TarFile,
                 progress: Progress) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Each table as JSON lines; returns the row counts and, per table of
    `archive.BLOB_COLUMNS`, the blobs its rows name (sha256 -> size)."""
    blob_columns = {table: (digest, size) for table, digest, size in archive.BLOB_COLUMNS}
    counts: dict[str, int] = {}
    named: dict[str, dict[str, int]] = {table: {} for table in blob_columns}
    for table in archive.tables():
        rows = connection.execute(select(table).order_by(*table.primary_key.columns))
        with tempfile.TemporaryFile() as spool:
            counts[table.name] = 0
            for row in rows:
                data = archive.encode_row(table, row)
                spool.write(json.dumps(data, ensure_ascii=False).encode() + b"\n")
                counts[table.name] += 1
                if table.name in blob_columns:
                    digest, size = blob_columns[table.name]
                    named[table.name][data[digest]] = data[size]
            _add_file(tar, archive.table_member(table), spool)
        progress(f"table {table.name}: {counts[table.name]} rows")
    return counts, named


def _copy_blobs(storage: BlobStorage, named: dict[str, dict[str, int]], tar: tarfile.TarFile,
                progress: Progress) -> dict[str, int]:
    """Add each named blob from storage; returns sha256 -> size of those added.

    Raises:
        BackupError: a blob named by a `blobs` row is missing from storage.
    """
    wanted = {sha: size for rows in named.values() for sha, size in rows.items()}
    added: dict[str, int] = {}
    done = archive.counter(progress, "blobs", len(wanted))
    with tempfile.TemporaryDirectory(prefix="hub-backup-") as scratch:
        for i, (sha, size) in enumerate(sorted(wanted.items()), 1):
            local = Path(scratch) / sha
            try:
                storage.copy_to(sha, local)
            except FileNotFoundError:
                if sha in named["blobs"]:
                    raise BackupError(f"blob {sha} is in the database but missing from storage",
                                      hint="the storage lost it; put it back from another copy "
                                           "of the file before backing up") from None
                # Else an uncommitted LFS upload that `gc` removed meanwhile: left out.
            else:
                with open(local, "rb") as f:
                    _add_file(tar, archive.blob_member(sha), f)
                local.unlink()
                added[sha] = size
            done(i)
    return added


def _add_file(tar: tarfile.TarFile, name: str, f: IO[bytes]) -> None:
    f.seek(0, 2)
    info = tarfile.TarInfo(name)
    info.size = f.tell()
    info.mtime = int(time.time())
    f.seek(0)
    tar.addfile(info, f)
