"""The reads the web UI needs beyond the service layer: full-text search with the UI's extra
filter (signed by a still-registered key), owner names and relevance ranking ("best match"),
home page counts, facets, and signature status.

Visibility is the service layer's rule (`search.visible`); full-text matching is
`textsearch.matches`. Queries are plain WHERE clauses over `adapters` (no subquery of whole
rows), so the listing indexes of migration 0002 answer counts and pages on their own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, case, func, or_, select
from sqlalchemy.orm import Session, lazyload, load_only, selectinload

from registry_server.models import (ADAPTER, Adapter, AdapterTag, Namespace, PublicKey, User,
                                    Version)
from registry_server.services.search import Page, SearchQuery, visible
from registry_server.services import accounts, textsearch
from registry_server.services.sqlplan import unindexed

# "best": relevance to the query's words (see `_relevance`), most downloaded first among
# equals and when there is no query.
UI_SORTS = ("best", "downloads", "recent")


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


def _latest_signed_by_registered_key() -> ColumnElement[bool]:
    """The adapter's latest version is signed by a key registered to the account that pushed
    it. A correlated EXISTS (two index lookups per adapter): as `latest_version_id IN (every
    signed version)`, PostgreSQL planned it at 10-17 s over 10,000 adapters."""
    return (select(Version.id)
            .join(PublicKey, and_(PublicKey.user_id == Version.pushed_by_id,
                                  PublicKey.key_id == Version.signer_key_id))
            .where(Version.id == Adapter.latest_version_id).exists())


def _conditions(session: Session, viewer: User | None,
                query: UiQuery) -> list[ColumnElement[bool]]:
    conditions = _listed(session, viewer)
    for column, value in ((Adapter.task, query.task), (Adapter.head_type, query.head_type),
                          (Adapter.base_model_hash, query.base_hash)):
        if value:
            conditions.append(unindexed(session, column) == value)
    if query.base_model:
        # As `hub search --base`: any case, any part of the name ("MiniLM" finds the packaged base).
        conditions.append(func.lower(unindexed(session, Adapter.base_model_name))
                          .contains(query.base_model.lower(), autoescape=True))
    if query.namespace:
        conditions.append(Adapter.namespace.has(Namespace.name == query.namespace))
    conditions += [Adapter.tags.any(AdapterTag.tag == tag) for tag in query.tags]
    conditions += [_word_matches(session, word) for word in textsearch.words(query.text)]
    if query.signed_only:
        conditions.append(_latest_signed_by_registered_key())
    return conditions


def _word_matches(session: Session, word: str) -> ColumnElement[bool]:
    """The adapter's text has a word starting with `word`, or its user or organisation name
    starts with it (any case). The owners are looked up first: most words name none, and then
    the condition is the full-text match alone, which the text index answers by itself."""
    text_match = textsearch.matches(session, word)
    owners = session.scalars(select(Namespace.id).where(
        func.lower(Namespace.name).startswith(word, autoescape=True))).all()
    return or_(text_match, Adapter.namespace_id.in_(owners)) if owners else text_match


def _relevance(words: list[str]) -> ColumnElement[int]:
    """How well an adapter matching every word fits them: a word starting a word of its name
    counts most, then its owner's name, then its description; the model card (whose generated
    boilerplate mentions every task's words) adds nothing, so it only decides which adapters
    match. The whole name typed as the query ("sst2 sentiment") comes first. Needs the
    adapter's namespace joined (`search` does)."""
    name = func.lower(Adapter.name)
    for mark in "-_.":
        name = func.replace(name, mark, " ")
    owner, description = func.lower(Namespace.name), func.lower(Adapter.description)
    score: ColumnElement[int] = case((name == " ".join(words), 10), else_=0)
    for word in words:
        score = score + case((_starts_a_word(name, word), 4), else_=0) \
            + case((owner.startswith(word, autoescape=True), 3), else_=0) \
            + case((_starts_a_word(description, word), 2), else_=0)
    return score


def _starts_a_word(text: ColumnElement[str], word: str) -> ColumnElement[bool]:
    return or_(text.startswith(word, autoescape=True),
               text.contains(" " + word, autoescape=True))


def _ranking_words(query: UiQuery) -> list[str]:
    """The words "best match" ranks by; none when another order was asked for or there is
    no query (then best match is most downloaded)."""
    return textsearch.words(query.text) if query.sort == "best" else []


def _order(query: UiQuery) -> tuple:
    if query.sort == "recent":
        return Adapter.updated_at.desc(), Adapter.id.desc()
    words = _ranking_words(query)
    if words:
        return _relevance(words).desc(), Adapter.downloads.desc(), Adapter.id.desc()
    return Adapter.downloads.desc(), Adapter.id.desc()


def search(session: Session, viewer: User | None, query: UiQuery) -> Page[Adapter]:
    """Adapters matching every filter of `query`, one page, sorted by relevance, downloads or
    recency; each with its tags and latest version loaded (not the version's files)."""
    conditions = _conditions(session, viewer, query)
    total = session.scalar(select(func.count(Adapter.id)).where(*conditions)) or 0
    latest = selectinload(Adapter.latest).options(
        lazyload(Version.files),
        load_only(Version.version, Version.created_at, Version.signer_key_id,
                  Version.pushed_by_id, Version.manifest))
    ranked = select(Adapter)
    if _ranking_words(query):
        # The owner's name counts in the ranking; other orders keep to the listing indexes.
        ranked = ranked.join(Namespace, Namespace.id == Adapter.namespace_id)
    items = session.scalars(
        ranked.where(*conditions).order_by(*_order(query))
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


def signatures(session: Session, versions: Iterable[Version | None]) -> dict[int, Signature]:
    """Who stands behind each version's signature (by version id): the account its key is
    registered to (the key's holder proved possession), and who pushed it. Two queries for a
    whole page of results."""
    shown = [v for v in versions if v is not None]
    owners = accounts.key_owners(session, [v.signer_key_id for v in shown])
    pusher_ids = {v.pushed_by_id for v in shown if v.pushed_by_id is not None}
    pushers = dict(session.execute(
        select(User.id, Namespace.name).join(Namespace, User.namespace_id == Namespace.id)
        .where(User.id.in_(pusher_ids))).all()) if pusher_ids else {}
    return {v.id: Signature(v.signer_key_id, owners.get(v.signer_key_id),
                            pushers.get(v.pushed_by_id)) for v in shown}


def signature(session: Session, version: Version) -> Signature:
    """`signatures` of one version."""
    return signatures(session, [version])[version.id]
