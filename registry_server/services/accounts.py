"""Users, organisations, memberships, API tokens and signing public keys."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hubcli.errors import SigningKeyError
from hubcli.signing.keys import key_id as public_key_id
from hubcli.signing.keys import verify_challenge
from registry_server.errors import BadRequest, Conflict, KeyProofRejected, NotFound
from registry_server.models import (KeyChallenge, Membership, Namespace, PublicKey, Token, User,
                                    as_utc, utcnow)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# First path segments the HTTP API and the web UI use: never namespace names.
RESERVED = frozenset({"api", "datasets", "spaces", "models", "lfs", "static", "settings",
                      "login", "logout", "search", "new", "docs", "admin", "ui", "user", "org"})
TOKEN_PREFIX = "hubr_"
SCOPES = ("read", "write")
# Recording every use of a token would turn each read into a write; once an hour is enough.
LAST_USED_RESOLUTION = timedelta(hours=1)
# What a key proof signs: this prefix and a nonce. Fixed text, so the signature cannot be
# replayed as anything else (bundle signatures sign a DSSE envelope, "DSSEv1 ...").
CHALLENGE_PREFIX = "hub-registry key proof v1 "
UPLOAD_HINT = "register keys with `hub keys upload`, which proves you hold the private key"


def check_name(name: str, what: str) -> None:
    """Raises: BadRequest: `name` is not a usable namespace or repository name."""
    if not NAME.fullmatch(name) or name.endswith(".git") or ".." in name:
        raise BadRequest(f"{what} {name!r} is not allowed",
                         hint="use letters, digits, '.', '_' or '-' (at most 96, starting with "
                              "a letter or digit, no '..', not ending in .git)")
    if name.lower() in RESERVED:
        raise BadRequest(f"{what} {name!r} is reserved")


def _new_namespace(session: Session, name: str, kind: str) -> Namespace:
    check_name(name, "name")
    # Compared regardless of case: `Alice` beside `alice` would pass for her.
    taken = session.scalar(select(Namespace.name).where(func.lower(Namespace.name) == name.lower()))
    if taken == name:
        raise Conflict(f"the name {name!r} is taken")
    if taken is not None:
        raise Conflict(f"the name {name!r} is taken: it differs from {taken!r} only in case")
    namespace = Namespace(name=name, kind=kind)
    session.add(namespace)
    return namespace


def create_user(session: Session, name: str, *, admin: bool = False) -> User:
    """Create a user (and the namespace of the same name).

    Raises:
        BadRequest: bad name. Conflict: the name is taken (by a user or an organisation).
    """
    user = User(namespace=_new_namespace(session, name, "user"), is_admin=admin)
    session.add(user)
    _commit_unique(session, f"the name {name!r} is taken")
    return user


def create_org(session: Session, name: str, *, members: list[str] = ()) -> Namespace:
    """Create an organisation with the given member users.

    Raises:
        BadRequest: bad name. Conflict: the name is taken. NotFound: a member does not exist.
    """
    org = _new_namespace(session, name, "org")
    users = [get_user(session, m) for m in members]
    session.flush()
    session.add_all(Membership(org_id=org.id, user_id=u.id) for u in users)
    _commit_unique(session, f"the name {name!r} is taken")
    return org


def add_member(session: Session, org_name: str, user_name: str) -> None:
    """Make a user a member of an organisation (no-op if they are one).

    Raises:
        NotFound: no such organisation or user.
    """
    org, user = get_org(session, org_name), get_user(session, user_name)
    if session.get(Membership, (org.id, user.id)) is None:
        session.add(Membership(org_id=org.id, user_id=user.id))
        _commit_unique(session, f"{user_name} is a member of {org_name} already")


def remove_member(session: Session, org_name: str, user_name: str) -> None:
    """Raises: NotFound: no such organisation, user or membership."""
    org, user = get_org(session, org_name), get_user(session, user_name)
    membership = session.get(Membership, (org.id, user.id))
    if membership is None:
        raise NotFound(f"{user_name} is not a member of {org_name}")
    session.delete(membership)
    session.commit()


def get_namespace(session: Session, name: str) -> Namespace:
    """Raises: NotFound: no user or organisation has this name."""
    namespace = session.scalar(select(Namespace).where(Namespace.name == name))
    if namespace is None:
        raise NotFound(f"no user or organisation named {name!r}")
    return namespace


def get_user(session: Session, name: str) -> User:
    """Raises: NotFound: no such user."""
    user = session.scalar(select(User).join(User.namespace).where(Namespace.name == name))
    if user is None:
        raise NotFound(f"no user named {name!r}")
    return user


def get_org(session: Session, name: str) -> Namespace:
    """Raises: NotFound: no such organisation."""
    namespace = get_namespace(session, name)
    if namespace.kind != "org":
        raise NotFound(f"no organisation named {name!r}")
    return namespace


def user_orgs(session: Session, user: User) -> list[Namespace]:
    return list(session.scalars(select(Namespace).join(Membership, Membership.org_id == Namespace.id)
                                .where(Membership.user_id == user.id).order_by(Namespace.name)))


def member_namespace_ids(session: Session, user: User | None) -> set[int]:
    """The namespaces whose private adapters `user` may read and whose adapters they may push."""
    if user is None:
        return set()
    orgs = session.scalars(select(Membership.org_id).where(Membership.user_id == user.id))
    return {user.namespace_id, *orgs}


def org_members(session: Session, org: Namespace) -> list[User]:
    return list(session.scalars(select(User).join(Membership, Membership.user_id == User.id)
                                .where(Membership.org_id == org.id)))


# --- tokens -------------------------------------------------------------------------------

def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_token(session: Session, user: User, *, name: str | None = None,
                 scope: str = "write") -> tuple[Token, str]:
    """Create an API token. Returns the row and the secret, which is shown once and stored
    only as its SHA-256. Names are unique among the user's live tokens (any case), so that
    "revoke laptop" names one token; without a name the token is "token", "token-2", ...

    Raises:
        BadRequest: unknown scope or bad name.
        Conflict: the user has a live token of this name.
    """
    if scope not in SCOPES:
        raise BadRequest(f"token scope {scope!r} is not one of {', '.join(SCOPES)}")
    taken = {t.name.lower() for t in list_tokens(session, user) if t.revoked_at is None}
    if name is None:
        name = next(n for n in ("token", *(f"token-{i}" for i in range(2, len(taken) + 3)))
                    if n not in taken)
    if not name or len(name) > 96:
        raise BadRequest("a token name must have 1 to 96 characters")
    if name.lower() in taken:
        raise Conflict(f"you already have a token named {name!r}",
                       hint="pick another name, or revoke that token first")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = Token(user_id=user.id, name=name, prefix=secret[:12], token_hash=hash_token(secret),
                  scope=scope)
    session.add(token)
    session.commit()
    return token, secret


def authenticate(session: Session, secret: str) -> Token | None:
    """The live (not revoked) token with this secret, or None."""
    token = session.scalar(select(Token).where(Token.token_hash == hash_token(secret)))
    if token is None or token.revoked_at is not None:
        return None
    now = utcnow()
    last = token.last_used_at
    if last is None or now - as_utc(last) > LAST_USED_RESOLUTION:
        token.last_used_at = now
        session.commit()
    return token


def list_tokens(session: Session, user: User) -> list[Token]:
    return list(session.scalars(select(Token).where(Token.user_id == user.id)
                                .order_by(Token.id)))


def revoke_token(session: Session, user: User, token_id: int) -> Token:
    """Revoke one of `user`'s tokens (no-op if revoked already).

    Raises:
        NotFound: the user has no such token.
    """
    token = session.get(Token, token_id)
    if token is None or token.user_id != user.id:
        raise NotFound(f"you have no token with id {token_id}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.commit()
    return token


# --- signing public keys ------------------------------------------------------------------

def issue_key_challenge(session: Session, user: User, ttl: timedelta) -> tuple[str, datetime]:
    """A challenge for `user` to sign with the private key they are about to register: valid
    for `ttl`, once. Returns (challenge text, expiry)."""
    now = utcnow()
    session.execute(delete(KeyChallenge).where(KeyChallenge.expires_at < now))
    nonce = secrets.token_urlsafe(32)
    session.add(KeyChallenge(nonce=nonce, user_id=user.id, expires_at=now + ttl))
    session.commit()
    return CHALLENGE_PREFIX + nonce, now + ttl


def register_public_key(session: Session, user: User, pem: str, *, challenge: str,
                        signature: str, name: str = "") -> PublicKey:
    """`add_public_key`, for a user who proves holding the private key: `signature` signs
    `challenge`, which this server issued to `user` and which has not expired or been used.
    The challenge is spent whatever the outcome.

    Raises:
        KeyProofRejected: an unknown, used, expired or foreign challenge, or a signature
        that does not verify with `pem`. BadRequest, Conflict: as `add_public_key`.
    """
    nonce = challenge.removeprefix(CHALLENGE_PREFIX)
    spent = session.execute(delete(KeyChallenge).where(
        KeyChallenge.nonce == nonce, KeyChallenge.user_id == user.id,
        KeyChallenge.expires_at >= utcnow()))
    session.commit()
    if not challenge.startswith(CHALLENGE_PREFIX) or spent.rowcount != 1:
        raise KeyProofRejected("the key challenge is unknown, used or expired",
                               hint="ask for a new one (POST /api/v1/keys/challenge); "
                                    + UPLOAD_HINT)
    kid = _key_id(pem)
    if not verify_challenge(pem.encode("utf-8"), challenge, signature):
        raise KeyProofRejected(f"the signature does not prove holding the private key of {kid}",
                               hint=UPLOAD_HINT)
    return add_public_key(session, user, pem, name=name)


def add_public_key(session: Session, user: User, pem: str, *, name: str = "") -> PublicKey:
    """Register a PEM public key to `user`; pushes signed with it are then accepted. Callers
    answering users check proof of possession first (`register_public_key`); the operator's
    `hub-registry add-key` trusts the operator.

    Raises:
        BadRequest: not a supported PEM public key.
        Conflict: the key is registered already (to this user or another: one owner a key).
    """
    kid = _key_id(pem)
    if len(name) > 96:
        raise BadRequest("a key name must have at most 96 characters")
    owner = session.scalar(select(PublicKey).where(PublicKey.key_id == kid))
    if owner is not None:
        raise _key_taken(kid, owner.user_id == user.id)
    key = PublicKey(user_id=user.id, key_id=kid, name=name, pem=pem)
    session.add(key)
    _commit_unique(session, _key_taken(kid, False))
    return key


def _key_id(pem: str) -> str:
    """Raises: BadRequest: not a supported PEM public key."""
    try:
        return public_key_id(pem.encode("utf-8"))
    except SigningKeyError as e:
        raise BadRequest(str(e).replace("public key: ", "", 1), hint=e.hint) from None


def _key_taken(kid: str, mine: bool) -> Conflict:
    if mine:
        return Conflict(f"key {kid} is registered already")
    return Conflict(f"key {kid} is registered to another account; a key belongs to one account",
                    hint="sign with a key of your own (`hub keygen`)")


def list_public_keys(session: Session, user: User) -> list[PublicKey]:
    return list(session.scalars(select(PublicKey).where(PublicKey.user_id == user.id)
                                .order_by(PublicKey.id)))


def key_owners(session: Session, key_ids: list[str]) -> dict[str, str]:
    """{key id: name of the account it is registered to} for those of `key_ids` that are."""
    rows = session.execute(select(PublicKey.key_id, Namespace.name)
                           .join(User, User.id == PublicKey.user_id).join(User.namespace)
                           .where(PublicKey.key_id.in_(set(key_ids))))
    return {kid: name for kid, name in rows}


def namespace_public_keys(session: Session, namespace: Namespace) -> list[PublicKey]:
    """The keys whose signatures the registry accepts for pushes to `namespace`: the user's
    own, or, for an organisation, every member's. Public by nature: pullers verify with them."""
    if namespace.kind == "org":
        owners = select(Membership.user_id).where(Membership.org_id == namespace.id)
    else:
        owners = select(User.id).where(User.namespace_id == namespace.id)
    return list(session.scalars(select(PublicKey).where(PublicKey.user_id.in_(owners))
                                .order_by(PublicKey.id)))


def delete_public_key(session: Session, user: User, kid: str) -> None:
    """Raises: NotFound: the user has no key with this id."""
    key = session.scalar(select(PublicKey).where(PublicKey.user_id == user.id,
                                                 PublicKey.key_id == kid))
    if key is None:
        raise NotFound(f"you have no key {kid}")
    session.delete(key)
    session.commit()


def _commit_unique(session: Session, error: str | Conflict) -> None:
    """Commit; a unique-constraint violation (a concurrent twin) becomes a Conflict."""
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise (error if isinstance(error, Conflict) else Conflict(error)) from None
