"""Engine and per-request session, as a Flask extension (`db.init_app(app)`).

View code gets the request's session from `db.session`; the service layer takes a `Session`
argument so the CLI, the web UI and tests can call it with any session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from flask import Flask, current_app, g
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

EXTENSION = "registry_db"
SQLITE_BUSY_TIMEOUT_MS = 30_000


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL, foreign keys and a busy timeout so several worker
    processes can share one file."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL is safe with WAL (never corrupts; a power cut may drop the last commits, whose
    # blobs `gc` then collects) and spares an fsync per write, e.g. per download count.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


class Database:
    """Holds one engine and session factory per app."""

    def init_app(self, app: Flask) -> None:
        engine = make_engine(app.config["DATABASE_URL"])
        app.extensions[EXTENSION] = sessionmaker(engine, expire_on_commit=False)
        app.teardown_appcontext(self._close)

    @staticmethod
    def factory(app: Flask | None = None) -> sessionmaker[Session]:
        return (app or current_app).extensions[EXTENSION]

    def engine(self, app: Flask | None = None) -> Engine:
        return self.factory(app).kw["bind"]

    @property
    def session(self) -> Session:
        """The current request's session, opened on first use and closed at teardown."""
        if "db_session" not in g:
            g.db_session = self.factory()()
        return g.db_session

    @staticmethod
    def _close(_exc: BaseException | None) -> None:
        session = g.pop("db_session", None)
        if session is not None:
            session.close()

    @contextmanager
    def session_scope(self, app: Flask | None = None) -> Iterator[Session]:
        """A session outside a request (CLI, tests); service functions commit their own work."""
        with self.factory(app)() as session:
            yield session


def insert_ignore(session: Session, model: type, rows: list[dict]) -> None:
    """INSERT rows, silently skipping those whose primary key exists (no race, no error)."""
    if not rows:
        return
    insert = {"postgresql": postgresql.insert,
              "sqlite": sqlite.insert}[session.get_bind().dialect.name]
    keys = [c.name for c in inspect(model).primary_key]
    session.execute(insert(model).values(rows).on_conflict_do_nothing(index_elements=keys))


db = Database()
