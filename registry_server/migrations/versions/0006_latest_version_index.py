"""latest version index: adapters found by the version `main` points at

Revision ID: 0006_latest_version_index
Revises: 0005_requirements
Create Date: 2026-11-23

- `ix_adapters_latest_version_id`: the web UI's signed-only filter joins signed versions to
  the adapters whose latest they are; without it PostgreSQL scanned a wider index once per
  signed version (4.5 s over 10,000 adapters).
"""

from __future__ import annotations

from alembic import op

revision = '0006_latest_version_index'
down_revision = '0005_requirements'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f('ix_adapters_latest_version_id'), 'adapters', ['latest_version_id'])


def downgrade() -> None:
    op.drop_index(op.f('ix_adapters_latest_version_id'), table_name='adapters')
