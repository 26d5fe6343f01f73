"""Restoring a backup: the blobs first, each checked against its digest, then every row in one
transaction. A damaged archive or a refused row therefore changes no row; blobs already put
back are harmless (`gc` removes those no row names).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, select, text

from hubcli.errors import BackupError
from hubcli.fsutil import CHUNK
from registry_server.backup import archive
from registry_server.backup.archive import Progress
from registry_server.storage import BlobStorage

BATCH = 1000
DAMAGED = "the archive is damaged; restore from another copy of it"


def restore(engine: Engine, storage: BlobStorage, path: Path, *, force: bool = False,
            progress: Progress | None = None) -> archive.Summary:
    """Put the backup `path` into the deployment behind `engine` and `storage`, which must be
    migrated and empty (`force`: replace what it holds).

    Raises:
        BackupError: `path` is not a backup, is damaged (names the member or blob), was written
            at another schema revision, the database is not migrated, or it holds data and
            `force` is off.
    """
    progress = progress or (lambda _message: None)
    with _open(path) as tar:
        try:
            manifest = _manifest(tar, path)
            _check_revision(engine, manifest["revision"], path)
            if not force:
                _refuse_data(engine)
            blob_bytes = _put_blobs(tar, storage, manifest["blobs"], path, progress)
            with engine.begin() as connection:
                if force:
                    _clear(connection)
                counts = _load_tables(connection, tar, manifest, path, progress)
                if engine.dialect.name == "postgresql":
                    _reset_sequences(connection)
        except (tarfile.TarError, EOFError) as e:  # a truncated archive, found while reading
            raise BackupError(f"{path} is truncated or damaged: {e}", path=str(path),
                              hint=DAMAGED) from None
    return archive.Summary(str(path), manifest["revision"], counts, len(manifest["blobs"]),
                           blob_bytes)


@contextmanager
def _open(path: Path) -> Iterator[tarfile.TarFile]:
    try:
        tar = tarfile.open(path, "r:")
    except (OSError, tarfile.TarError) as e:
        raise BackupError(f"cannot read {path}: {e}", path=str(path),
                          hint="pass a file written by `hub-registry backup`") from None
    with tar:
        yield tar


def _manifest(tar: tarfile.TarFile, path: Path) -> dict[str, Any]:
    try:
        manifest = json.load(tar.extractfile(archive.MANIFEST))
    except (KeyError, ValueError):
        raise BackupError(f"{path} has no readable {archive.MANIFEST}: not a registry backup",
                          path=str(path), hint="pass a file written by `hub-registry backup`"
                          ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != archive.FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise BackupError(f"{path} is in backup format {found!r}; this hub-registry reads "
                          f"format {archive.FORMAT}", path=str(path),
                          hint="restore it with the hub-registry release that wrote it")
    blobs = manifest.get("blobs")
    if not (isinstance(manifest.get("revision"), str) and isinstance(manifest.get("tables"), dict)
            and isinstance(blobs, dict)
            and all(archive.SHA256.fullmatch(sha) and type(size) is int
                    for sha, size in blobs.items())):
        raise BackupError(f"{path}: {archive.MANIFEST} lacks a revision, the row counts or "
                          "the blob list, or names a blob by something other than its SHA-256",
                          path=str(path), hint=DAMAGED)
    return manifest


def _check_revision(engine: Engine, revision: str, path: Path) -> None:
    code = archive.schema_revision(engine)
    if revision != code:
        raise BackupError(
            f"{path} holds schema revision {revision}; this hub-registry is at {code}",
            path=str(path),
            hint="restore it with the hub-registry release that wrote it, run `hub-registry "
                 "migrate` with this release, and back it up again")


def _refuse_data(engine: Engine) -> None:
    with engine.connect() as connection:
        held = {t.name: n for t in archive.tables()
                if (n := connection.scalar(select(func.count()).select_from(t)))}
    if held:
        listed = ", ".join(f"{name} ({n})" for name, n in held.items())
        raise BackupError(f"the deployment holds data: rows in {listed}",
                          hint="restore into a fresh deployment (after `hub-registry "
                               "migrate`), or pass --force to replace everything in this one")


def _put_blobs(tar: tarfile.TarFile, storage: BlobStorage, blobs: dict[str, int], path: Path,
               progress: Progress) -> int:
    """Check each blob's digest and size and store it; returns the bytes stored.

    Raises:
        BackupError: a blob is missing or damaged, or the storage refused it.
    """
    done = archive.counter(progress, "blobs", len(blobs))
    with tempfile.TemporaryDirectory(prefix="hub-restore-") as scratch:
        for i, (sha, size) in enumerate(sorted(blobs.items()), 1):
            local = Path(scratch) / sha
            _extract_checked(tar, sha, size, local, path)
            try:
                storage.put(sha, local)
            except OSError as e:
                raise BackupError(f"cannot store blob {sha}: {e.strerror or e}",
                                  hint="check the storage's space and permissions, then run "
                                       "the restore again") from None
            local.unlink()
            done(i)
    return sum(blobs.values())


def _extract_checked(tar: tarfile.TarFile, sha: str, size: int, dest: Path, path: Path) -> None:
    try:
        member = tar.extractfile(archive.blob_member(sha))
    except KeyError:
        raise BackupError(f"{path} lacks blob {sha}", path=str(path), hint=DAMAGED) from None
    digest, n = hashlib.sha256(), 0
    with member, open(dest, "wb") as out:
        while chunk := member.read(CHUNK):
            digest.update(chunk)
            n += len(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha or n != size:
        raise BackupError(f"{path}: blob {sha} is damaged ({n} bytes hashing to "
                          f"{digest.hexdigest()})", path=str(path), hint=DAMAGED)


def _clear(connection: Connection) -> None:
    """Delete every row, children first (the cycle through `adapters` broken first)."""
    for table in archive.tables():
        for column in archive.deferred_columns(table):
            connection.execute(table.update().values({column.name: None}))
    for table in reversed(archive.tables()):
        connection.execute(table.delete())


def _load_tables(connection: Connection, tar: tarfile.TarFile, manifest: dict[str, Any],
                 path: Path, progress: Progress) -> dict[str, int]:
    counts: dict[str, int] = {}
    later: list[tuple[Table, dict[str, Any], dict[str, Any]]] = []
    for table in archive.tables():
        deferred = [c.name for c in archive.deferred_columns(table)]
        keys = [c.name for c in table.primary_key.columns]
        batch: list[dict[str, Any]] = []
        counts[table.name] = 0
        for row in _rows(tar, table, path):
            if table.name == "blobs" and row["sha256"] not in manifest["blobs"]:
                raise BackupError(f"{path}: the blobs table names {row['sha256']}, which the "
                                  "archive lacks", path=str(path), hint=DAMAGED)
            if held := {name: row.pop(name) for name in deferred if row[name] is not None}:
                later.append((table, {k: row[k] for k in keys}, held))
            row.update({name: None for name in held})
            batch.append(row)
            counts[table.name] += 1
            if len(batch) == BATCH:
                connection.execute(table.insert(), batch)
                batch = []
        if batch:
            connection.execute(table.insert(), batch)
        if counts[table.name] != manifest["tables"].get(table.name):
            raise BackupError(f"{path}: {archive.table_member(table)} holds "
                              f"{counts[table.name]} rows, backup.json says "
                              f"{manifest['tables'].get(table.name)}", path=str(path),
                              hint=DAMAGED)
        progress(f"table {table.name}: {counts[table.name]} rows")
    for table, key, values in later:
        connection.execute(table.update().where(
            *[table.c[name] == value for name, value in key.items()]).values(values))
    return counts


def _rows(tar: tarfile.TarFile, table: Table, path: Path) -> Iterator[dict[str, Any]]:
    member = archive.table_member(table)
    try:
        f = tar.extractfile(member)
    except KeyError:
        raise BackupError(f"{path} lacks {member}", path=str(path), hint=DAMAGED) from None
    with f:
        for line_no, line in enumerate(f, 1):
            try:
                yield archive.decode_row(table, json.loads(line))
            except (KeyError, ValueError, TypeError) as e:
                raise BackupError(f"{path}: {member} line {line_no}: {type(e).__name__}: {e}",
                                  path=str(path), hint=DAMAGED) from None


def _reset_sequences(connection: Connection) -> None:
    """Point each PostgreSQL id sequence past the restored ids (inserting explicit ids does
    not advance them, so the next row would collide)."""
    for table in archive.tables():
        column = table.autoincrement_column
        if column is None:
            continue
        top = connection.scalar(select(func.max(column)))
        connection.execute(text("SELECT setval(pg_get_serial_sequence(:t, :c), :next, false)"),
                           {"t": table.name, "c": column.name, "next": (top or 0) + 1})
