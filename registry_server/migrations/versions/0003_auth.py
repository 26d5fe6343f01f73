"""authentication: server-side browser sessions, sign-in throttle, signing-key proofs, one
account per key, names unique regardless of case

Revision ID: 0003_auth
Revises: 0002
Create Date: 2026-11-23

- `ui_sessions`: a signed-in browser (sign-out and password changes delete rows).
- `ui_login_failures`: recent wrong passwords per account and client address.
- `key_challenges`: single-use nonces a client signs to prove it holds a key's private half.
- `public_keys.key_id` unique: a key belongs to one account. Keys registered to more than
  one account (nobody proved which holds the private key) are removed from all of them; their
  owners register them again with `hub keys upload`, which now proves possession.
- `namespaces.lower(name)` and `adapters (namespace_id, lower(name))` unique: `Alice` cannot
  sit beside `alice`. Existing look-alikes stop the migration with their names: rename one
  first.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003_auth'
down_revision = '0002'
branch_labels = None
depends_on = None

LOOK_ALIKES = {
    'namespaces': "SELECT lower(name) FROM namespaces GROUP BY lower(name) HAVING count(*) > 1",
    'adapters': "SELECT min(n.name) || '/' || lower(a.name) FROM adapters a "
                "JOIN namespaces n ON n.id = a.namespace_id "
                "GROUP BY a.namespace_id, lower(a.name) HAVING count(*) > 1",
}


def _refuse_look_alikes() -> None:
    bind = op.get_bind()
    for table, query in LOOK_ALIKES.items():
        names = [row[0] for row in bind.execute(sa.text(query))]
        if names:
            raise RuntimeError(f"{table} differing only in case: {', '.join(names)}; rename "
                               "all but one of each before migrating")


def upgrade() -> None:
    # First, before any change: SQLite does not roll DDL back here.
    _refuse_look_alikes()
    op.create_table('ui_sessions',
    sa.Column('id_hash', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_ui_sessions_user_id_users')),
    sa.PrimaryKeyConstraint('id_hash', name=op.f('pk_ui_sessions'))
    )
    op.create_index(op.f('ix_ui_sessions_user_id'), 'ui_sessions', ['user_id'])
    op.create_table('ui_login_failures',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=160), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ui_login_failures'))
    )
    op.create_index(op.f('ix_ui_login_failures_source'), 'ui_login_failures', ['source'])
    op.create_index(op.f('ix_ui_login_failures_at'), 'ui_login_failures', ['at'])
    op.create_table('key_challenges',
    sa.Column('nonce', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'],
                            name=op.f('fk_key_challenges_user_id_users')),
    sa.PrimaryKeyConstraint('nonce', name=op.f('pk_key_challenges'))
    )
    op.execute("DELETE FROM public_keys WHERE key_id IN "
               "(SELECT key_id FROM public_keys GROUP BY key_id HAVING count(*) > 1)")
    op.create_index('uq_public_keys_key_id', 'public_keys', ['key_id'], unique=True)
    op.create_index('uq_namespaces_lower_name', 'namespaces', [sa.text('lower(name)')],
                    unique=True)
    op.create_index('uq_adapters_namespace_id_lower_name', 'adapters',
                    ['namespace_id', sa.text('lower(name)')], unique=True)


def downgrade() -> None:
    op.drop_index('uq_adapters_namespace_id_lower_name', table_name='adapters')
    op.drop_index('uq_namespaces_lower_name', table_name='namespaces')
    op.drop_index('uq_public_keys_key_id', table_name='public_keys')
    op.drop_table('key_challenges')
    op.drop_index(op.f('ix_ui_login_failures_at'), table_name='ui_login_failures')
    op.drop_index(op.f('ix_ui_login_failures_source'), table_name='ui_login_failures')
    op.drop_table('ui_login_failures')
    op.drop_index(op.f('ix_ui_sessions_user_id'), table_name='ui_sessions')
    op.drop_table('ui_sessions')
