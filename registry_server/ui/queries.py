"""The reads the web UI needs beyond the service layer: full-text search with the UI's extra
filter (signed by a still-registered key), home page counts, facets, and signature status.

Visibility is the service layer's rule (`search.visible`); full-text matching is
`textsearch.matches`, on the index migration 0002 built.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Select, exists, func, select
from sqlalchemy.orm import Session, lazyload, load_only, selectinload

from registry_server.models import Adapter, AdapterTag, Namespace, PublicKey, User, Version
from registry_server.services.search import Page, SearchQuery, visible
from registry_server.ui import textsearch

UI_SORTS = ("downloads", "recent")


@dataclass(frozen=True)
class UiQuery(SearchQuery):
    """The service layer's query, plus: only adapters whose latest version is signed by a key
    its publisher still has registered (keys removed since do not count)."""

    signed_only: bool = False


@dataclass(frozen=True)
class Counts:
    adapters: int
    versions: int
    bases: int


@dataclass(frozen=True)
class Signature:
    key_id: str
    owners: list[str]  # the accounts that have registered this key
    pushed_by: str | None
    verified: bool  # the key is registered to the account that pushed the version


def _listed(session: Session, viewer: User | None) -> Select:
    """Adapters `viewer` may see that have a `main` version."""
    return select(Adapter).where(Adapter.latest_version_id.is_not(None), visible(session, viewer))


def _signed_by_registered_key() -> Select:
    return select(Version.id).where(exists().where(PublicKey.user_id == Version.pushed_by_id,
                                                   PublicKey.key_id == Version.signer_key_id))


def search(session: Session, viewer: User | None, query: UiQuery) -> Page[Adapter]:
    """Adapters matching every filter of `query`, one page, sorted by downloads or recency;
    each with its tags and latest version loaded (not the version's files)."""
    stmt = _listed(session, viewer)
    for column, value in ((Adapter.task, query.task), (Adapter.head_type, query.head_type),
                          (Adapter.base_model_name, query.base_model),
                          (Adapter.base_model_hash, query.base_hash)):
        if value:
            stmt = stmt.where(column == value)
    if query.namespace:
        stmt = stmt.where(Adapter.namespace.has(Namespace.name == query.namespace))
    for tag in query.tags:
        stmt = stmt.where(Adapter.tags.any(AdapterTag.tag == tag))
    text_match = textsearch.matches(session, query.text)
    if text_match is not None:
        stmt = stmt.where(text_match)
    if query.signed_only:
        stmt = stmt.where(Adapter.latest_version_id.in_(_signed_by_registered_key()))
    total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    order = ((Adapter.updated_at.desc(), Adapter.id.desc()) if query.sort == "recent"
             else (Adapter.downloads.desc(), Adapter.id.desc()))
    latest = selectinload(Adapter.latest).options(
        lazyload(Version.files),
        load_only(Version.version, Version.created_at, Version.signer_key_id,
                  Version.pushed_by_id))
    items = session.scalars(
        stmt.order_by(*order).limit(query.per_page).offset((query.page - 1) * query.per_page)
        .options(selectinload(Adapter.tags), latest)).unique().all()
    return Page(list(items), total, query.page, query.per_page)


def verified_versions(session: Session, versions: Iterable[Version]) -> set[int]:
    """Ids of those `versions` signed by a key registered to the account that pushed them."""
    ids = [v.id for v in versions]
    if not ids:
        return set()
    return set(session.scalars(_signed_by_registered_key().where(Version.id.in_(ids))))


def counts(session: Session, viewer: User | None) -> Counts:
    """Adapters, live versions and distinct base models the viewer can see."""
    listed = _listed(session, viewer).subquery()
    adapters = session.scalar(select(func.count()).select_from(listed)) or 0
    versions = session.scalar(select(func.count(Version.id))
                              .where(Version.adapter_id.in_(select(listed.c.id)),
                                     Version.deleted_at.is_(None))) or 0
    bases = session.scalar(select(func.count(func.distinct(listed.c.base_model_hash)))) or 0
    return Counts(adapters, versions, bases)


def popular_tags(session: Session, viewer: User | None, limit: int = 12) -> list[tuple[str, int]]:
    """The most used tags among visible adapters: (tag, adapters), most used first."""
    listed = _listed(session, viewer).with_only_columns(Adapter.id)
    rows = session.execute(select(AdapterTag.tag, func.count().label("n"))
                           .where(AdapterTag.adapter_id.in_(listed))
                           .group_by(AdapterTag.tag).order_by(func.count().desc(), AdapterTag.tag)
                           .limit(limit))
    return [(tag, n) for tag, n in rows]


def base_models(session: Session, viewer: User | None, limit: int = 50) -> list[str]:
    """Base model names of visible adapters, the most used first (for the filter's list)."""
    listed = _listed(session, viewer).subquery()
    return list(session.scalars(select(listed.c.base_model_name).group_by(listed.c.base_model_name)
                                .order_by(func.count().desc(), listed.c.base_model_name)
                                .limit(limit)))


def signature(session: Session, version: Version) -> Signature:
    """Who stands behind a version's signature: the accounts that registered its key."""
    rows = session.execute(select(Namespace.name, PublicKey.user_id)
                           .join(User, User.id == PublicKey.user_id).join(User.namespace)
                           .where(PublicKey.key_id == version.signer_key_id)
                           .order_by(Namespace.name)).all()
    return Signature(version.signer_key_id, [name for name, _ in rows],
                     version.pushed_by.name if version.pushed_by else None,
                     any(user_id == version.pushed_by_id for _, user_id in rows))
