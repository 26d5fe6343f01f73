"""Database migrations (Alembic), run by `hub-registry migrate` and on the embedded default's
first start."""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(engine: Engine | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if engine is not None:
        # '%' would be read as configparser interpolation in the URL.
        cfg.set_main_option("sqlalchemy.url",
                            engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, *, lock_file: Path | None = None) -> None:
    """Bring the schema to the newest revision.

    `lock_file` serialises concurrent callers on one machine (several workers starting on one
    SQLite file); PostgreSQL deployments run `hub-registry migrate` once instead.
    """
    with _file_lock(lock_file), engine.begin() as connection:
        cfg = alembic_config()
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


def head() -> str:
    """The newest revision the code knows."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current(engine: Engine) -> str | None:
    """The database's revision (None: no schema yet)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def pending(engine: Engine) -> bool:
    """Whether the database is behind the newest revision."""
    return current(engine) != head()


@contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
