"""Web sign-in passwords: set (which ends every browser session of the user) and check."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from werkzeug.security import check_password_hash, generate_password_hash

from registry_server.errors import BadRequest
from registry_server.models import Namespace, User
from registry_server.ui.models import BrowserSession, Credential

MIN_LENGTH = 8
MAX_LENGTH = 1024
# Checked when the name is unknown, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = generate_password_hash("not a password")


def set_password(session: Session, user: User, password: str) -> None:
    """Store `password` (hashed with werkzeug.security) as `user`'s web sign-in password and
    end every browser session of `user`: whoever knew the old password is signed out.

    Raises:
        BadRequest: shorter than 8 or longer than 1024 characters.
    """
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise BadRequest(f"a password must have {MIN_LENGTH} to {MAX_LENGTH} characters")
    credential = session.get(Credential, user.id)
    if credential is None:
        credential = Credential(user_id=user.id, password_hash="")
        session.add(credential)
    credential.password_hash = generate_password_hash(password)
    session.execute(delete(BrowserSession).where(BrowserSession.user_id == user.id))
    session.commit()


def check_password(session: Session, name: str, password: str) -> User | None:
    """The user called `name`, if `password` is their web password."""
    row = session.execute(select(User, Credential.password_hash)
                          .join(User.namespace).join(Credential, Credential.user_id == User.id)
                          .where(Namespace.name == name)).first()
    if row is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    user, stored = row
    return user if check_password_hash(stored, password) else None
