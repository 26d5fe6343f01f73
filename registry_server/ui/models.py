"""The web UI's own tables: a user's sign-in password (migration 0002), the open browser
sessions and recent failed sign-ins (migration 0003_auth).

Kept beside `users` rather than in it so the account model stays the API's; a user without a
password row simply cannot sign in to the web UI (API tokens work as before).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from registry_server.models import NAME_LEN, Base, utcnow


class Credential(Base):
    __tablename__ = "ui_credentials"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), primary_key=True)
    # werkzeug.security's "method$salt$hash" string.
    password_hash: Mapped[str] = mapped_column(String(256))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow,
                                                 onupdate=utcnow)


class BrowserSession(Base):
    """A signed-in browser. The cookie carries a random id; only its SHA-256 is stored, and
    deleting the row (sign-out, password change) ends the session whatever cookie survives."""

    __tablename__ = "ui_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LoginFailure(Base):
    """One wrong password for an account from one client address: the throttle counts them
    in the database so that every worker process sees the same count."""

    __tablename__ = "ui_login_failures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Lower-cased account name and the client address, joined by a space.
    source: Mapped[str] = mapped_column(String(NAME_LEN + 64), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
