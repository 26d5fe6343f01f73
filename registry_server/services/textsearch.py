"""Full-text matching of adapters, on the index migration 0002 built for each database:
SQLite's FTS5 table `adapters_fts`, PostgreSQL's GIN-indexed column `adapters.search_vector`
(generated from `search_text`, outside the ORM model).

Every word of the query must start a word of the adapter's search text (name, description,
tags, model card): "sent" finds "sentiment", "sst2 adapter" finds "sst2-adapter".
"""

from __future__ import annotations

import re

from sqlalchemy import ColumnElement, func, literal_column, select, table
from sqlalchemy.orm import Session

from registry_server.models import Adapter
from registry_server.services.sqlplan import unindexed

WORD = re.compile(r"\w+")
MAX_WORDS = 10
_FTS = table("adapters_fts", literal_column("rowid"))
_FTS_TABLE = literal_column("adapters_fts")
_VECTOR = literal_column("adapters.search_vector")
_SIMPLE = literal_column("'simple'::regconfig")  # the text search configuration of the column


def words(query: str) -> list[str]:
    """The query's words, lower-cased (at most 10). Quotes and operators are dropped, so user
    input never reaches the FTS query syntax."""
    return WORD.findall(query.lower())[:MAX_WORDS]


def matches(session: Session, query: str) -> ColumnElement[bool] | None:
    """A condition on `Adapter` true when it matches every word of `query`; None when the query
    has no words.

    Raises:
        NotImplementedError: a database other than SQLite or PostgreSQL.
    """
    found = words(query)
    if not found:
        return None
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        fts_query = " ".join(f'"{w}"*' for w in found)
        # An anonymous bound parameter, so that one statement may hold several of these.
        matching = select(_FTS.c.rowid).where(_FTS_TABLE.op("MATCH")(fts_query))
        # Checked against the match set while scanning a listing index (see sqlplan), rather
        # than by fetching each matching adapter row by id.
        return unindexed(session, Adapter.id).in_(matching)
    if dialect == "postgresql":
        ts_query = " & ".join(f"'{w}':*" for w in found)
        return _VECTOR.op("@@")(func.to_tsquery(_SIMPLE, ts_query))
    raise NotImplementedError(f"no full-text search for {dialect}")
