"""Keeping SQLite's query planner on the listing indexes.

SQLite has no table statistics unless someone runs ANALYZE, so it takes an equality on any
indexed column as highly selective: `task = 'tagging'` goes through the one-column task index,
fetches every matching adapter row (wide: the search text holds the model card), then sorts.
Written `+task = 'tagging'`, the term cannot use an index, and SQLite scans the narrow listing
index of migration 0002 in sort order instead, which holds the column: a few milliseconds
however many adapters match. PostgreSQL keeps statistics and plans well on its own.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session
from sqlalchemy.sql import operators
from sqlalchemy.sql.expression import UnaryExpression


def unindexed(session: Session, column: ColumnElement) -> ColumnElement:
    """`column`, marked on SQLite so that a condition on it does not pick an index."""
    if session.get_bind().dialect.name != "sqlite":
        return column
    return UnaryExpression(column, operator=operators.custom_op("+"), type_=column.type)
