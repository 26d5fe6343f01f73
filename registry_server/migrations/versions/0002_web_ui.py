"""web UI: password credentials and the full-text search index

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

`ui_credentials` holds the web sign-in password of a user (API clients use tokens).

Full-text search over `adapters.search_text`:
- SQLite: an FTS5 table with `adapters` as its external content, kept in step by triggers, so
  every writer (the service layer, the CLI, bulk inserts) updates it in the same transaction.
- PostgreSQL: a stored generated column `search_vector` (`to_tsvector('simple', search_text)`,
  so the database keeps it in step) with a GIN index. Stored rather than an expression index:
  a plan that filters rows one by one (a common word, a tag join) must not re-parse every
  model card.

Listing indexes: an adapter row is wide (its search text holds the model card), so on SQLite
a count or a sorted page that reads the table touches one page per adapter. These indexes hold
every column the UI filters and sorts on, so counts and pages are read from them alone.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

SQLITE_FTS = [
    "CREATE VIRTUAL TABLE adapters_fts USING fts5(search_text, content='adapters', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER adapters_fts_insert AFTER INSERT ON adapters BEGIN "
    "INSERT INTO adapters_fts(rowid, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER adapters_fts_delete AFTER DELETE ON adapters BEGIN "
    "INSERT INTO adapters_fts(adapters_fts, rowid, search_text) "
    "VALUES ('delete', old.id, old.search_text); END",
    "CREATE TRIGGER adapters_fts_update AFTER UPDATE OF search_text ON adapters BEGIN "
    "INSERT INTO adapters_fts(adapters_fts, rowid, search_text) "
    "VALUES ('delete', old.id, old.search_text); "
    "INSERT INTO adapters_fts(rowid, search_text) VALUES (new.id, new.search_text); END",
    "INSERT INTO adapters_fts(adapters_fts) VALUES ('rebuild')",
]
# The columns of visibility and of the search filters, after the sort key.
LISTING = ['id', 'private', 'latest_version_id', 'namespace_id', 'task', 'head_type',
           'base_model_name', 'base_model_hash']
PG_FTS = [
    "ALTER TABLE adapters ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (strip(to_tsvector('simple', search_text))) STORED",
    "CREATE INDEX ix_adapters_search_vector ON adapters USING gin (search_vector)",
    # Kept in the row (compressed) rather than moved to the TOAST table, where reading it back
    # costs an index lookup per adapter when a common word makes the plan read every row.
    "ALTER TABLE adapters ALTER COLUMN search_vector SET STORAGE MAIN",
]


def upgrade() -> None:
    op.create_table('ui_credentials',
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('password_hash', sa.String(length=256), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_ui_credentials_user_id_users')),
    sa.PrimaryKeyConstraint('user_id', name=op.f('pk_ui_credentials'))
    )
    op.create_index('ix_adapters_ui_downloads', 'adapters', ['downloads', *LISTING])
    op.create_index('ix_adapters_ui_updated', 'adapters', ['updated_at', *LISTING])
    # "Signed by a registered key" joins versions to public_keys on these two columns.
    op.create_index('ix_versions_ui_signer', 'versions', ['pushed_by_id', 'signer_key_id'])
    op.create_index('ix_versions_ui_live', 'versions', ['adapter_id', 'deleted_at'])
    dialect = op.get_bind().dialect.name
    for statement in {'sqlite': SQLITE_FTS, 'postgresql': PG_FTS}.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == 'sqlite':
        for name in ('insert', 'delete', 'update'):
            op.execute(f"DROP TRIGGER adapters_fts_{name}")
        op.execute("DROP TABLE adapters_fts")
    elif dialect == 'postgresql':
        op.execute("DROP INDEX ix_adapters_search_vector")
        op.execute("ALTER TABLE adapters DROP COLUMN search_vector")
    for table, index in (('versions', 'ix_versions_ui_live'), ('versions', 'ix_versions_ui_signer'),
                         ('adapters', 'ix_adapters_ui_updated'),
                         ('adapters', 'ix_adapters_ui_downloads')):
        op.drop_index(index, table_name=table)
    op.drop_table('ui_credentials')
