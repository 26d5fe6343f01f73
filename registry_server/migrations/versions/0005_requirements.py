"""requirements: which versions a composed version (a fusion, or an adapter stacked on others)
requires, recorded at push from its manifest's `requires`

Revision ID: 0005_requirements
Revises: 0004_hub_protocol
Create Date: 2026-11-23

- `version_requirements`: (version, position) -> the required version. Deleting a required
  version is refused while a live version requires it; the adapter page lists "uses" and
  "used by" from here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005_requirements'
down_revision = '0004_hub_protocol'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('version_requirements',
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('required_version_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['version_id'], ['versions.id'],
                            name=op.f('fk_version_requirements_version_id_versions')),
    sa.ForeignKeyConstraint(['required_version_id'], ['versions.id'],
                            name=op.f('fk_version_requirements_required_version_id_versions')),
    sa.PrimaryKeyConstraint('version_id', 'position', name=op.f('pk_version_requirements'))
    )
    op.create_index(op.f('ix_version_requirements_required_version_id'), 'version_requirements',
                    ['required_version_id'])


def downgrade() -> None:
    op.drop_index(op.f('ix_version_requirements_required_version_id'),
                  table_name='version_requirements')
    op.drop_table('version_requirements')
