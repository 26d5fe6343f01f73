"""The sign-in throttle: after LOGIN_MAX_FAILURES wrong passwords for one account from one
client address within LOGIN_FAILURE_WINDOW seconds, that pair is refused (even with the right
password) until the oldest of those failures leaves the window.

Counted in the database, so every worker of a multi-process server (gunicorn -w N) sees the
same count. Per account and address: a guesser is slowed down without locking the account's
owner out from elsewhere. API tokens are not throttled: they hold 256 random bits, so guessing
one is hopeless however fast.
"""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from registry_server.models import as_utc, utcnow
from registry_server.ui.models import LoginFailure


def source(name: str, client: str | None) -> str:
    """What failures are counted by: the account name (any case) and the client address."""
    return f"{name.lower()} {client or '-'}"[:LoginFailure.source.type.length]


def retry_after(session: Session, key: str, limit: int, window: timedelta) -> int | None:
    """Seconds until `key` may try again, or None when it may now."""
    now = utcnow()
    count, oldest = session.execute(
        select(func.count(), func.min(LoginFailure.at))
        .where(LoginFailure.source == key, LoginFailure.at > now - window)).one()
    if count < limit:
        return None
    return max(1, math.ceil((as_utc(oldest) + window - now).total_seconds()))


def record_failure(session: Session, key: str, window: timedelta) -> None:
    """Count one wrong password for `key`; failures older than `window` are forgotten."""
    now = utcnow()
    session.execute(delete(LoginFailure).where(LoginFailure.at <= now - window))
    session.add(LoginFailure(source=key, at=now))
    session.commit()


def forget(session: Session, key: str) -> None:
    """A successful sign-in: start counting afresh."""
    session.execute(delete(LoginFailure).where(LoginFailure.source == key))
    session.commit()
