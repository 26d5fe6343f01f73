"""the rest of the Hub protocol: deleted repositories keep their names, moved repositories
leave redirects, base-model repositories

Revision ID: 0004_hub_protocol
Revises: 0003_auth
Create Date: 2026-11-23

- `adapters.deleted_at`: `delete_repo` marks the row (its versions are deleted as one by one),
  so the name, and every `name@version` pin, is never taken by another repository.
- `repo_redirects`: the names a repository had before `move_repo`; ids and pins under the old
  name keep resolving to it.
- `adapters.kind` ('adapter' | 'base', existing rows: 'adapter'): what the repository holds.
- `versions.tokenizer_hash` (indexed): an adapter's from its manifest (filled in for existing
  rows), a base's computed on push.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004_hub_protocol'
down_revision = '0003_auth'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.add_column(sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('kind', sa.String(length=8), server_default='adapter',
                                      nullable=False))
        batch_op.create_index(batch_op.f('ix_adapters_kind'), ['kind'], unique=False)
    with op.batch_alter_table('versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tokenizer_hash', sa.String(length=71), nullable=True))
        batch_op.create_index(batch_op.f('ix_versions_tokenizer_hash'), ['tokenizer_hash'],
                              unique=False)
    _fill_tokenizer_hashes()
    op.create_table('repo_redirects',
    sa.Column('namespace', sa.String(length=96), nullable=False),
    sa.Column('name', sa.String(length=96), nullable=False),
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'],
                            name=op.f('fk_repo_redirects_adapter_id_adapters')),
    sa.PrimaryKeyConstraint('namespace', 'name', name=op.f('pk_repo_redirects'))
    )
    op.create_index(op.f('ix_repo_redirects_adapter_id'), 'repo_redirects', ['adapter_id'])


def _fill_tokenizer_hashes() -> None:
    versions = sa.table('versions', sa.column('id', sa.Integer), sa.column('manifest', sa.JSON),
                        sa.column('tokenizer_hash', sa.String))
    bind = op.get_bind()
    for row in bind.execute(sa.select(versions.c.id, versions.c.manifest)).all():
        value = ((row.manifest or {}).get('base_model') or {}).get('tokenizer_hash')
        if isinstance(value, str):
            bind.execute(versions.update().where(versions.c.id == row.id)
                         .values(tokenizer_hash=value[:71]))


def downgrade() -> None:
    with op.batch_alter_table('versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_versions_tokenizer_hash'))
        batch_op.drop_column('tokenizer_hash')
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_adapters_kind'))
        batch_op.drop_column('kind')
    op.drop_index(op.f('ix_repo_redirects_adapter_id'), table_name='repo_redirects')
    op.drop_table('repo_redirects')
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.drop_column('deleted_at')
