"""Finding adapters: filtered, sorted, paginated search, and adapters compatible with a base.

Only adapters the viewer may read and that have a `main` version (one not yanked) are found.
Every filter is an indexed column of `adapters` (copied from the latest version at push time)
except text, which goes through the full-text index (`textsearch`: SQLite FTS5 or PostgreSQL
tsvector), the same matching as the web UI's search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, Select, false, func, or_, select
from sqlalchemy.orm import Session

from registry_server.errors import BadRequest
from registry_server import semver
from registry_server.models import ADAPTER, Adapter, AdapterTag, Namespace, User, Version
from registry_server.services.accounts import member_namespace_ids
from registry_server.services import textsearch
from registry_server.services.repos import pick_latest

SORTS = ("downloads", "recent", "created", "name")
T = TypeVar("T")


@dataclass(frozen=True)
class SearchQuery:
    text: str = ""
    task: str | None = None
    head_type: str | None = None
    base_model: str | None = None  # base model name, exact
    base_hash: str | None = None  # "sha256:..." content hash of the base
    tags: tuple[str, ...] = ()  # all must be present
    namespace: str | None = None
    kind: str | None = ADAPTER  # None: adapters and bases alike (the Hub's list_models)
    sort: str = "downloads"
    page: int = 1
    per_page: int = 20


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


@dataclass(frozen=True)
class Compatible:
    adapter: Adapter
    version: Version  # the newest live version trained on the base
    versions: list[str] = field(default_factory=list)  # every live version trained on it


def visible(session: Session, viewer: User | None) -> ColumnElement[bool]:
    """Adapters `viewer` may see: public ones and those of their namespaces."""
    ids = member_namespace_ids(session, viewer)
    return or_(Adapter.private.is_(False), Adapter.namespace_id.in_(ids) if ids else false())


def search(session: Session, viewer: User | None, query: SearchQuery) -> Page[Adapter]:
    """Adapters matching every given filter.

    Raises:
        BadRequest: unknown sort, or a page number or size below 1.
    """
    _check_paging(query.page, query.per_page)
    if query.sort not in SORTS:
        raise BadRequest(f"unknown sort {query.sort!r}; use one of {', '.join(SORTS)}")
    stmt = select(Adapter).where(Adapter.latest_version_id.is_not(None), visible(session, viewer))
    for column, value in ((Adapter.task, query.task), (Adapter.head_type, query.head_type),
                          (Adapter.base_model_name, query.base_model),
                          (Adapter.base_model_hash, query.base_hash)):
        if value:
            stmt = stmt.where(column == value)
    if query.kind:
        stmt = stmt.where(Adapter.kind == query.kind)
    if query.namespace:
        stmt = stmt.join(Adapter.namespace).where(Namespace.name == query.namespace)
    for tag in query.tags:
        stmt = stmt.where(Adapter.id.in_(select(AdapterTag.adapter_id)
                                         .where(AdapterTag.tag == tag)))
    text_match = textsearch.matches(session, query.text)
    if text_match is not None:
        stmt = stmt.where(text_match)
    order = {"downloads": (Adapter.downloads.desc(), Adapter.id.desc()),
             "recent": (Adapter.updated_at.desc(), Adapter.id.desc()),
             "created": (Adapter.created_at.desc(), Adapter.id.desc()),
             "name": (Adapter.name, Adapter.id)}[query.sort]
    return _paginate(session, stmt.order_by(*order), query.page, query.per_page)


def compatible(session: Session, viewer: User | None, base_hash: str, *, page: int = 1,
               per_page: int = 20) -> Page[Compatible]:
    """Adapters with a live (not yanked, not deleted) version trained on the base whose content
    hash is `base_hash`, most downloaded first, each with its newest such version.

    Raises:
        BadRequest: a page number or size below 1.
    """
    _check_paging(page, per_page)
    live = (Version.base_model_hash == base_hash, Version.deleted_at.is_(None),
            Version.yanked_at.is_(None))
    stmt = (select(Adapter).where(Adapter.id.in_(select(Version.adapter_id).where(*live)),
                                  Adapter.kind == ADAPTER, visible(session, viewer))
            .order_by(Adapter.downloads.desc(), Adapter.id.desc()))
    adapters = _paginate(session, stmt, page, per_page)
    by_adapter: dict[int, list[Version]] = {}
    ids = [a.id for a in adapters.items]
    for v in session.scalars(select(Version).where(Version.adapter_id.in_(ids), *live)):
        by_adapter.setdefault(v.adapter_id, []).append(v)
    items = []
    for adapter in adapters.items:
        versions = by_adapter[adapter.id]
        ordered = sorted(versions, key=lambda v: semver.sort_key(v.version), reverse=True)
        items.append(Compatible(adapter, pick_latest(versions), [v.version for v in ordered]))
    return Page(items, adapters.total, page, per_page)


def _check_paging(page: int, per_page: int) -> None:
    if page < 1 or per_page < 1:
        raise BadRequest("page and per_page must be at least 1")


def _paginate(session: Session, stmt: Select, page: int, per_page: int) -> Page:
    total = session.scalar(select(func.count()).select_from(stmt.order_by(None).subquery()))
    items = list(session.scalars(stmt.limit(per_page).offset((page - 1) * per_page)).unique())
    return Page(items, total or 0, page, per_page)
