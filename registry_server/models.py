"""Database tables (SQLAlchemy 2 typed models).

A namespace is a user's or an organisation's name; adapters (repositories) live in one.
A version is one immutable commit of an adapter, named by its manifest's semantic version;
its files point at content-addressed blobs. The uniqueness of (adapter, version) is a database
constraint, so concurrent pushes of the same version cannot both succeed.

The search fields of an adapter (task, head type, base model, description, tags, model card
text) are copied from its latest version, so search never has to join through versions.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, ForeignKey, Index, Integer, MetaData,
                        String, Text, UniqueConstraint, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAME_LEN = 96
# What a repository holds, fixed by its first version: a signed adapter bundle (manifest.json),
# or a base model (config.json and safetensors weights) that adapters are trained on.
ADAPTER, BASE = "adapter", "base"
KEY_ID_LEN = 71  # "sha256:" + 64 hex

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """`moment` as an aware UTC datetime (SQLite hands back naive ones; all are stored in UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Namespace(Base):
    """A user's or an organisation's name: the first half of every repo id."""

    __tablename__ = "namespaces"
    # `Alice` may not sit beside `alice`: a look-alike name would borrow the other's trust.
    __table_args__ = (Index("uq_namespaces_lower_name", text("lower(name)"), unique=True),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    kind: Mapped[str] = mapped_column(String(8))  # "user" | "org"
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    user: Mapped[User | None] = relationship(back_populates="namespace")


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id"), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    namespace: Mapped[Namespace] = relationship(back_populates="user", lazy="joined")

    @property
    def name(self) -> str:
        return self.namespace.name


class Membership(Base):
    """A user belongs to an organisation and may push to its adapters."""

    __tablename__ = "memberships"

    org_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Token(Base):
    """An API token; only its SHA-256 is stored."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    # The first characters of the token, shown in listings so a user can tell tokens apart.
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(8))  # "read" | "write"
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    user: Mapped[User] = relationship(lazy="joined")


class PublicKey(Base):
    """A signing public key registered to a user; pushes must be signed by one of them.
    A key belongs to one account (its holder proved possession when registering it), so the
    key names who signed."""

    __tablename__ = "public_keys"
    __table_args__ = (UniqueConstraint("user_id", "key_id"),
                      Index("uq_public_keys_key_id", "key_id", unique=True))

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    key_id: Mapped[str] = mapped_column(String(KEY_ID_LEN))
    name: Mapped[str] = mapped_column(String(NAME_LEN), default="")
    pem: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class KeyChallenge(Base):
    """A single-use nonce issued to a user: signing it proves holding a key's private half."""

    __tablename__ = "key_challenges"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Blob(Base):
    """A stored file content, named by its SHA-256 (stored once however often it is used)."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    git_oid: Mapped[str] = mapped_column(String(40))  # git blob sha1, the Hub's "oid" of a file
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Adapter(Base):
    """A repository: one adapter, all its versions."""

    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("namespace_id", "name"),
                      Index("uq_adapters_namespace_id_lower_name", "namespace_id",
                            text("lower(name)"), unique=True))

    id: Mapped[int] = mapped_column(primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id"))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    private: Mapped[bool] = mapped_column(Boolean, default=False)
    kind: Mapped[str] = mapped_column(String(8), default=ADAPTER, server_default=ADAPTER,
                                      index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow,
                                                 index=True)
    downloads: Mapped[int] = mapped_column(BigInteger, default=0, index=True)
    # The version `main` points at: newest by semantic version, neither yanked nor deleted.
    # Indexed: the signed-only filter and "used by" look adapters up by their latest version.
    latest_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("versions.id", use_alter=True, name="fk_adapters_latest_version"), index=True)
    # Search fields, copied from the latest version.
    description: Mapped[str] = mapped_column(Text, default="")
    task: Mapped[str | None] = mapped_column(String(32), index=True)
    head_type: Mapped[str | None] = mapped_column(String(32), index=True)
    base_model_name: Mapped[str | None] = mapped_column(String(256), index=True)
    base_model_hash: Mapped[str | None] = mapped_column(String(KEY_ID_LEN), index=True)
    # Lower-cased name, description, tags and model card: what text search looks through.
    search_text: Mapped[str] = mapped_column(Text, default="")
    # A deleted repository keeps its row, so its name (and so `name@version` pins) is never
    # taken by another repository.
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    namespace: Mapped[Namespace] = relationship(lazy="joined")
    latest: Mapped[Version | None] = relationship(foreign_keys=[latest_version_id],
                                                  post_update=True)
    tags: Mapped[list[AdapterTag]] = relationship(cascade="all, delete-orphan",
                                                  order_by="AdapterTag.tag")

    @property
    def repo_id(self) -> str:
        return f"{self.namespace.name}/{self.name}"


class RepoRedirect(Base):
    """The name a repository had before it was moved: old ids and pins keep resolving."""

    __tablename__ = "repo_redirects"

    namespace: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AdapterTag(Base):
    __tablename__ = "adapter_tags"

    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class Version(Base):
    """One pushed version: immutable except for its yank and delete marks.

    For a base model, `base_model_name` is the repository itself, `base_model_hash` the
    content hash of its weights (so one index finds adapters and their base alike),
    `manifest` what was read from it, and `signer_key_id` empty (bases are not signed)."""

    __tablename__ = "versions"
    __table_args__ = (
        UniqueConstraint("adapter_id", "version"),
        UniqueConstraint("adapter_id", "commit_sha"),
        Index("ix_versions_base_model_hash", "base_model_hash"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"))
    version: Mapped[str] = mapped_column(String(64))
    commit_sha: Mapped[str] = mapped_column(String(40))
    # SHA-256 over the sorted (path, blob sha256) pairs: equal trees mean equal content.
    tree_digest: Mapped[str] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(Text, default="")
    # The model card (README.md) text, kept for search and display.
    card: Mapped[str] = mapped_column(Text, default="")
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    task: Mapped[str] = mapped_column(String(32))
    head_type: Mapped[str] = mapped_column(String(32))
    base_model_name: Mapped[str] = mapped_column(String(256))
    base_model_hash: Mapped[str] = mapped_column(String(KEY_ID_LEN))
    # The base's tokenizer hash (recorded in an adapter's manifest; computed for a base, when
    # its tokenizer is one the registry can read), indexed beside the content hash.
    tokenizer_hash: Mapped[str | None] = mapped_column(String(KEY_ID_LEN), index=True)
    signer_key_id: Mapped[str] = mapped_column(String(KEY_ID_LEN))
    pushed_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    downloads: Mapped[int] = mapped_column(BigInteger, default=0)
    yanked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    yank_reason: Mapped[str | None] = mapped_column(Text)
    # A deleted version keeps its row so that its number is never reused.
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    adapter: Mapped[Adapter] = relationship(foreign_keys=[adapter_id])
    pushed_by: Mapped[User | None] = relationship()
    files: Mapped[list[VersionFile]] = relationship(cascade="all, delete-orphan",
                                                    order_by="VersionFile.path", lazy="selectin")

    @property
    def yanked(self) -> bool:
        return self.yanked_at is not None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


class VersionFile(Base):
    __tablename__ = "version_files"

    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"), primary_key=True)
    path: Mapped[str] = mapped_column(String(128), primary_key=True)
    blob_sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"), index=True)

    blob: Mapped[Blob] = relationship(lazy="joined")


class Requirement(Base):
    """One adapter a composed version (a fusion, or an adapter stacked on others) requires,
    pinned as its manifest's `requires` says: recorded at push, so the registry can say who
    uses what and refuse deleting a version others require."""

    __tablename__ = "version_requirements"

    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    required_version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"), index=True)

    version: Mapped[Version] = relationship(foreign_keys=[version_id])
    required: Mapped[Version] = relationship(foreign_keys=[required_version_id])


class LfsUpload(Base):
    """An LFS object uploaded for an adapter: a commit may reference it by oid.

    Without this record a commit could name any stored blob by its hash and so read another
    adapter's (possibly private) file.
    """

    __tablename__ = "lfs_uploads"

    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id"), primary_key=True)
    oid: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


__all__ = ["ADAPTER", "BASE", "Adapter", "AdapterTag", "Base", "Blob", "KeyChallenge", "LfsUpload",
           "Membership", "Namespace", "PublicKey", "RepoRedirect", "Requirement", "Token", "User",
           "Version", "VersionFile", "as_utc",
           "utcnow"]
