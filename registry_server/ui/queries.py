"""The reads the web UI needs beyond the service layer: full-text search with the UI's extra
filter (signed by a still-registered key), home page counts, facets, and signature status.

Visibility is the service layer's rule (`search.visible`); full-text matching is
`textsearch.matches`. Queries are plain WHERE clauses over `adapters` (no subquery of whole
rows), so the listing indexes of migration 0002 answer counts and pages on their own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.orm import Session, lazyload, load_only, selectinload

from registry_server.models import (ADAPTER, Adapter, AdapterTag, Namespace, PublicKey, User,
                                    Version)
from registry_server.services.search import Page, SearchQuery, visible
from registry_server.services import accounts, textsearch
from registry_server.services.sqlplan import unindexed

UI_SORTS = ("downloads", "recent")


@dataclass(frozen=True)
class UiQuery(SearchQuery):
    """The service layer's query, plus: only adapters whose latest version is signed by a key
    its publisher still has registered (keys removed since do not count)."""

    signed_only: bool = False


@dataclass(frozen=True)
class Summary:
    """The registry at a glance, over public adapters: sizes, popular tags, base models."""

    adapters: int
    versions: int  # not deleted (yanked ones count)
    bases: int  # distinct base model content hashes
    tags: list[tuple[str, int]]  # (tag, adapters), most used first
    base_models: list[str]  # names, most used first


@dataclass(frozen=True)
class Signature:
    key_id: str
    owner: str | None  # the account the key is registered to (one at most), if any now
    pushed_by: str | None

    @property
    def verified(self) -> bool:
        """The key is registered to the account that pushed the version."""
        return self.owner is not None and self.owner == self.pushed_by


def _listed(session: Session, viewer: User | None) -> list[ColumnElement[bool]]:
    """Conditions for the adapters `viewer` may see that have a `main` version (base models
    are not listed among them: each has its own page)."""
    return [Adapter.latest_version_id.is_not(None), Adapter.kind == ADAPTER,
            visible(session, viewer)]


def _signed_by_registered_key() -> Select:
    """Ids of versions signed by a key registered to the account that pushed them."""
    return select(Version.id).join(PublicKey, and_(PublicKey.user_id == Version.pushed_by_id,
                                                   PublicKey.key_id == Version.signer_key_id))


def _conditions(session: Session, viewer: User | None,
                query: UiQuery) -> list[ColumnElement[bool]]:
    conditions = _listed(session, viewer)
    for column, value in ((Adapter.task, query.task), (Adapter.head_type, query.head_type),
                          (Adapter.base_model_name, query.base_model),
                          (Adapter.base_model_hash, query.base_hash)):
        if value:
            conditions.append(unindexed(session, column) == value)
    if query.namespace:
        conditions.append(Adapter.namespace.has(Namespace.name == query.namespace))
    conditions += [Adapter.tags.any(AdapterTag.tag == tag) for tag in query.tags]
    text_match = textsearch.matches(session, query.text)
    if text_match is not None:
        conditions.append(text_match)
    if query.signed_only:
        conditions.append(Adapter.latest_version_id.in_(_signed_by_registered_key()))
    return conditions


def search(session: Session, viewer: User | None, query: UiQuery) -> Page[Adapter]:
    """Adapters matching every filter of `query`, one page, sorted by downloads or recency;
    each with its tags and latest version loaded (not the version's files)."""
    conditions = _conditions(session, viewer, query)
    total = session.scalar(select(func.count(Adapter.id)).where(*conditions)) or 0
    order = ((Adapter.updated_at.desc(), Adapter.id.desc()) if query.sort == "recent"
             else (Adapter.downloads.desc(), Adapter.id.desc()))
    latest = selectinload(Adapter.latest).options(
        lazyload(Version.files),
        load_only(Version.version, Version.created_at, Version.signer_key_id,
                  Version.pushed_by_id))
    items = session.scalars(
        select(Adapter).where(*conditions).order_by(*order)
        .limit(query.per_page).offset((query.page - 1) * query.per_page)
        .options(selectinload(Adapter.tags), latest)).unique().all()
    return Page(list(items), total, query.page, query.per_page)


def summary(session: Session, *, tags: int = 12, bases: int = 50) -> Summary:
    """Sizes, the most used tags and the most used base model names of public adapters."""
    listed = _listed(session, None)
    listed_ids = select(Adapter.id).where(*listed)
    adapters = session.scalar(select(func.count(Adapter.id)).where(*listed)) or 0
    versions = session.scalar(select(func.count(Version.id)).where(
        Version.adapter_id.in_(listed_ids), Version.deleted_at.is_(None))) or 0
    base_count = session.scalar(select(func.count(func.distinct(Adapter.base_model_hash)))
                                .where(*listed)) or 0
    tag_rows = session.execute(
        select(AdapterTag.tag, func.count().label("n")).where(AdapterTag.adapter_id.in_(listed_ids))
        .group_by(AdapterTag.tag).order_by(func.count().desc(), AdapterTag.tag).limit(tags))
    name = unindexed(session, Adapter.base_model_name)
    base_names = session.scalars(select(Adapter.base_model_name).where(*listed).group_by(name)
                                 .order_by(func.count().desc(), name).limit(bases))
    return Summary(adapters, versions, base_count, [(t, n) for t, n in tag_rows],
                   list(base_names))


class SummaryCache:
    """`summary`, recomputed at most once per `ttl` seconds: it reads every listed adapter,
    and a minute-old count or tag list is as good on a home page or as a search hint."""

    def __init__(self, ttl: float = 60.0) -> None:
        self.ttl = ttl
        self._value: Summary | None = None
        self._expires = 0.0

    def get(self, session: Session) -> Summary:
        now = time.monotonic()
        if self._value is None or now >= self._expires:
            # Two requests may both recompute at expiry; both get a correct answer.
            self._value, self._expires = summary(session), now + self.ttl
        return self._value


def signature(session: Session, version: Version) -> Signature:
    """Who stands behind a version's signature: the account its key is registered to (the
    key's holder proved possession), whoever pushed it."""
    owner = accounts.key_owners(session, [version.signer_key_id]).get(version.signer_key_id)
    return Signature(version.signer_key_id, owner,
                     version.pushed_by.name if version.pushed_by else None)
