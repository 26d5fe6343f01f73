"""Web sign-in passwords: set, check, and the fingerprint that ties a browser session to the
password it was opened with, so that changing the password ends every other session."""

from __future__ import annotations

import hashlib
import hmac

from sqlalchemy import select
from sqlalchemy.orm import Session
from werkzeug.security import check_password_hash, generate_password_hash

from registry_server.errors import BadRequest
from registry_server.models import Namespace, User
from registry_server.ui.models import Credential

MIN_LENGTH = 8
MAX_LENGTH = 1024
# Checked when the name is unknown, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = generate_password_hash("not a password")


def fingerprint(stored_hash: str) -> str:
    """A short digest of a stored password hash, kept in the signed session cookie."""
    return hashlib.sha256(stored_hash.encode()).hexdigest()[:16]


def set_password(session: Session, user: User, password: str) -> str:
    """Store `password` (hashed with werkzeug.security) as `user`'s web sign-in password.
    Returns the new fingerprint.

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
    session.commit()
    return fingerprint(credential.password_hash)


def check_password(session: Session, name: str, password: str) -> tuple[User, str] | None:
    """(user, fingerprint) if `password` is the web password of the user called `name`."""
    row = session.execute(select(User, Credential.password_hash)
                          .join(User.namespace).join(Credential, Credential.user_id == User.id)
                          .where(Namespace.name == name)).first()
    if row is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    user, stored = row
    return (user, fingerprint(stored)) if check_password_hash(stored, password) else None


def session_user(session: Session, user_id: int, session_fingerprint: str) -> User | None:
    """The user a browser session names, if their password is still the one it began with."""
    row = session.execute(select(User, Credential.password_hash)
                          .join(Credential, Credential.user_id == User.id)
                          .where(User.id == user_id)).first()
    if row is None or not hmac.compare_digest(fingerprint(row[1]), session_fingerprint):
        return None
    return row[0]
