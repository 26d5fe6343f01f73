"""Small filesystem helpers: every write goes to a temp file first, then is renamed into place,
so a crash never leaves a half-written file behind."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

# How much of a file is read, copied or streamed at a time, client and registry alike.
CHUNK = 1 << 20


@contextmanager
def atomic_writer(path: Path, *, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file to write; on success it is synced and renamed onto `path` in one step.
    On failure the temp file is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write `data` to `path` via a temp file in the same folder and an atomic rename."""
    with atomic_writer(path, mode=mode) as f:
        f.write(data)


def atomic_copy(source: Path, path: Path, *, mode: int | None = None) -> None:
    """Copy `source` to `path` in 1 MiB chunks, atomically (never half-copied)."""
    with atomic_writer(path, mode=mode) as f, open(source, "rb") as src:
        shutil.copyfileobj(src, f, CHUNK)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


@contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield a temp folder beside `final`; on success it replaces `final` as a whole.

    On failure the temp folder is removed and `final` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_json_cache(path: Path) -> dict:
    """A JSON cache file's contents; missing or damaged counts as empty (it is rebuilt)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def spelt_as_path(ref: str) -> bool:
    """Whether `ref` is spelt as a path (./x, ../x, /x, ~/x): a folder, never a registry or
    Hub id, there or not."""
    return ref.startswith(("./", "../", "/", "~"))


def expanded(path: str | Path) -> Path:
    """`path` with a leading ~ or ~user made the home folder, or as written where there is
    none (`~nosuchuser`: a folder that is not there, not an error)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # no such user, or no home to expand to
        return Path(path)


def is_dir(path: str | Path) -> bool:
    """`expanded(path).is_dir()`, and False where the system cannot look the name up at all
    (longer than a file name may be: a long text where a folder may stand)."""
    try:
        return expanded(path).is_dir()
    except OSError:
        return False


def is_too_long(err: OSError) -> bool:
    """True for the error of a name longer than the system takes (ENAMETOOLONG)."""
    return err.errno == errno.ENAMETOOLONG


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    return _hash_file(hashlib.sha256(), path)


def git_blob_oid(path: Path) -> str:
    """Git's blob id of a file: hex SHA-1 of "blob <size>\\0" + its bytes (how the Hugging Face
    API names a file that is not in LFS)."""
    return _hash_file(hashlib.sha1(b"blob %d\0" % os.path.getsize(path)), path)


def _hash_file(h, path: Path) -> str:
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
