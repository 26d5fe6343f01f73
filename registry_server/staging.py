"""The instance's staging folder (`<instance>/tmp`): where pushes and LFS uploads are written
before they are checked and stored.

A push that dies with its process (SIGKILL, power cut, OOM kill) leaves its folder behind;
`clean_stale` removes what nothing has written to for `STALE_AFTER` seconds. It runs when the
app starts and in `hub-registry gc`. A push in progress writes continuously, so its newest
modification time stays fresh and it is kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flask import Flask

STALE_AFTER = 6 * 3600


def root(app: Flask) -> Path:
    """The staging folder, created if missing."""
    path = Path(app.instance_path) / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def workdir(app: Flask, prefix: str) -> Iterator[Path]:
    """A private, empty folder under the staging folder, removed on leaving."""
    with tempfile.TemporaryDirectory(dir=root(app), prefix=prefix) as work:
        yield Path(work)


def clean_stale(folder: Path, *, older_than: float = STALE_AFTER,
                now: float | None = None) -> list[str]:
    """Remove the entries of `folder` not written to for `older_than` seconds; returns their
    names. A missing folder holds nothing."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    for entry in entries:
        if now - _last_write(Path(entry.path)) < older_than:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            Path(entry.path).unlink(missing_ok=True)
        removed.append(entry.name)
    return sorted(removed)


def _last_write(path: Path) -> float:
    """The newest modification time of `path` and anything in it."""
    try:
        newest = path.lstat().st_mtime
        if path.is_dir() and not path.is_symlink():
            for dirpath, dirnames, filenames in os.walk(path):
                for name in dirnames + filenames:
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    except FileNotFoundError:  # removed meanwhile: a push that just finished
        return time.time()
    return newest
