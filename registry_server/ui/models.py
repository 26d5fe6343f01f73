"""The web UI's own table (created by migration 0002): a user's sign-in password.

Kept beside `users` rather than in it so the account model stays the API's; a user without a
row here simply cannot sign in to the web UI (API tokens work as before).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from registry_server.models import Base, utcnow


class Credential(Base):
    __tablename__ = "ui_credentials"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), primary_key=True)
    # werkzeug.security's "method$salt$hash" string.
    password_hash: Mapped[str] = mapped_column(String(256))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow,
                                                 onupdate=utcnow)
