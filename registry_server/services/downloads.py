"""Download counting, per version and per adapter.

Writing a row for every download would put a database write (and, on SQLite, the one write
lock shared by all worker processes) on the download path. Counts are therefore added up in
memory and written in one transaction every `interval` seconds by a background thread, and
at process exit. An interval of 0 writes each download at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import Counter

from sqlalchemy import bindparam, update
from sqlalchemy.orm import Session, sessionmaker

from registry_server.models import Adapter, Version

EXTENSION = "registry_downloads"
log = logging.getLogger(__name__)

# Built once: on the download path, building a statement costs more than running it.
_ADD_TO_VERSION = (update(Version).where(Version.id == bindparam("row_id"))
                   .values(downloads=Version.downloads + bindparam("n"))
                   .execution_options(synchronize_session=False))
_ADD_TO_ADAPTER = (update(Adapter).where(Adapter.id == bindparam("row_id"))
                   .values(downloads=Adapter.downloads + bindparam("n"))
                   .execution_options(synchronize_session=False))


def add_downloads(session: Session, versions: Counter[int], adapters: Counter[int]) -> None:
    """Add download counts (row id -> count) to versions and adapters, in one transaction."""
    for statement, counts in ((_ADD_TO_VERSION, versions), (_ADD_TO_ADAPTER, adapters)):
        for row_id, n in sorted(counts.items()):  # a fixed order: no deadlock between flushes
            session.execute(statement, {"row_id": row_id, "n": n})
    session.commit()


class DownloadCounter:
    """Counts downloads in memory and writes them every `interval` seconds."""

    def __init__(self, sessions: sessionmaker[Session], interval: float) -> None:
        self.sessions = sessions
        self.interval = interval
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._versions: Counter[int] = Counter()
        self._adapters: Counter[int] = Counter()
        self._closed = threading.Event()

    def add(self, version_id: int, adapter_id: int) -> None:
        if self.interval <= 0:
            with self.sessions() as session:
                add_downloads(session, Counter({version_id: 1}), Counter({adapter_id: 1}))
            return
        with self._lock:
            self._start_in_this_process()
            self._versions[version_id] += 1
            self._adapters[adapter_id] += 1

    def flush(self) -> None:
        """Write the pending counts now; if that fails they stay pending for the next try."""
        with self._lock:
            versions, adapters = self._versions, self._adapters
            self._versions, self._adapters = Counter(), Counter()
        if not versions:
            return
        try:
            with self.sessions() as session:
                add_downloads(session, versions, adapters)
        except Exception:
            with self._lock:
                self._versions.update(versions)
                self._adapters.update(adapters)
            raise

    def close(self) -> None:
        """Write what is pending and stop: for an app shut down before its process ends (the
        quickstart's registry), whose database may be gone by the time atexit runs."""
        self._closed.set()
        atexit.unregister(self.flush)
        self.flush()

    def _start_in_this_process(self) -> None:
        # Worker processes are forked from a parent that may have built the app (gunicorn
        # --preload): each starts its own flusher thread on its first download.
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._versions, self._adapters = Counter(), Counter()
        threading.Thread(target=self._run, name="download-counter", daemon=True).start()
        atexit.register(self.flush)

    def _run(self) -> None:
        while not self._closed.wait(self.interval):
            try:
                self.flush()
            except Exception:  # e.g. the database restarting: retried next round
                log.exception("could not write download counts")
