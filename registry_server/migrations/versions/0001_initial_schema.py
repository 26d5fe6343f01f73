"""initial schema

Revision ID: 0001
Revises:
Create Date: 2025-01-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('blobs',
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('git_oid', sa.String(length=40), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('sha256', name=op.f('pk_blobs'))
    )
    op.create_table('namespaces',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=96), nullable=False),
    sa.Column('kind', sa.String(length=8), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_namespaces')),
    sa.UniqueConstraint('name', name=op.f('uq_namespaces_name'))
    )
    op.create_table('adapters',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('namespace_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=96), nullable=False),
    sa.Column('private', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('downloads', sa.BigInteger(), nullable=False),
    sa.Column('latest_version_id', sa.Integer(), nullable=True),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('task', sa.String(length=32), nullable=True),
    sa.Column('head_type', sa.String(length=32), nullable=True),
    sa.Column('base_model_name', sa.String(length=256), nullable=True),
    sa.Column('base_model_hash', sa.String(length=71), nullable=True),
    sa.Column('search_text', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['namespace_id'], ['namespaces.id'], name=op.f('fk_adapters_namespace_id_namespaces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_adapters')),
    sa.UniqueConstraint('namespace_id', 'name', name=op.f('uq_adapters_namespace_id_name'))
    )
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_adapters_base_model_hash'), ['base_model_hash'], unique=False)
        batch_op.create_index(batch_op.f('ix_adapters_base_model_name'), ['base_model_name'], unique=False)
        batch_op.create_index(batch_op.f('ix_adapters_downloads'), ['downloads'], unique=False)
        batch_op.create_index(batch_op.f('ix_adapters_head_type'), ['head_type'], unique=False)
        batch_op.create_index(batch_op.f('ix_adapters_task'), ['task'], unique=False)
        batch_op.create_index(batch_op.f('ix_adapters_updated_at'), ['updated_at'], unique=False)

    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('namespace_id', sa.Integer(), nullable=False),
    sa.Column('is_admin', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['namespace_id'], ['namespaces.id'], name=op.f('fk_users_namespace_id_namespaces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('namespace_id', name=op.f('uq_users_namespace_id'))
    )
    op.create_table('adapter_tags',
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('tag', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], name=op.f('fk_adapter_tags_adapter_id_adapters')),
    sa.PrimaryKeyConstraint('adapter_id', 'tag', name=op.f('pk_adapter_tags'))
    )
    with op.batch_alter_table('adapter_tags', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_adapter_tags_tag'), ['tag'], unique=False)

    op.create_table('lfs_uploads',
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('oid', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], name=op.f('fk_lfs_uploads_adapter_id_adapters')),
    sa.PrimaryKeyConstraint('adapter_id', 'oid', name=op.f('pk_lfs_uploads'))
    )
    op.create_table('memberships',
    sa.Column('org_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['org_id'], ['namespaces.id'], name=op.f('fk_memberships_org_id_namespaces')),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_memberships_user_id_users')),
    sa.PrimaryKeyConstraint('org_id', 'user_id', name=op.f('pk_memberships'))
    )
    op.create_table('public_keys',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('key_id', sa.String(length=71), nullable=False),
    sa.Column('name', sa.String(length=96), nullable=False),
    sa.Column('pem', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_public_keys_user_id_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_public_keys')),
    sa.UniqueConstraint('user_id', 'key_id', name=op.f('uq_public_keys_user_id_key_id'))
    )
    with op.batch_alter_table('public_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_public_keys_user_id'), ['user_id'], unique=False)

    op.create_table('tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=96), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('scope', sa.String(length=8), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_tokens_user_id_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_tokens_token_hash'))
    )
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tokens_user_id'), ['user_id'], unique=False)

    op.create_table('versions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('commit_sha', sa.String(length=40), nullable=False),
    sa.Column('tree_digest', sa.String(length=64), nullable=False),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('card', sa.Text(), nullable=False),
    sa.Column('manifest', sa.JSON(), nullable=False),
    sa.Column('task', sa.String(length=32), nullable=False),
    sa.Column('head_type', sa.String(length=32), nullable=False),
    sa.Column('base_model_name', sa.String(length=256), nullable=False),
    sa.Column('base_model_hash', sa.String(length=71), nullable=False),
    sa.Column('signer_key_id', sa.String(length=71), nullable=False),
    sa.Column('pushed_by_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('downloads', sa.BigInteger(), nullable=False),
    sa.Column('yanked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('yank_reason', sa.Text(), nullable=True),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], name=op.f('fk_versions_adapter_id_adapters')),
    sa.ForeignKeyConstraint(['pushed_by_id'], ['users.id'], name=op.f('fk_versions_pushed_by_id_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_versions')),
    sa.UniqueConstraint('adapter_id', 'commit_sha', name=op.f('uq_versions_adapter_id_commit_sha')),
    sa.UniqueConstraint('adapter_id', 'version', name=op.f('uq_versions_adapter_id_version'))
    )
    with op.batch_alter_table('versions', schema=None) as batch_op:
        batch_op.create_index('ix_versions_base_model_hash', ['base_model_hash'], unique=False)
    # adapters.latest_version_id and versions.adapter_id point at each other: the second
    # foreign key can only be added once both tables exist (batch mode copes with SQLite).
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.create_foreign_key('fk_adapters_latest_version', 'versions',
                                    ['latest_version_id'], ['id'])

    op.create_table('version_files',
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('path', sa.String(length=128), nullable=False),
    sa.Column('blob_sha256', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['blob_sha256'], ['blobs.sha256'], name=op.f('fk_version_files_blob_sha256_blobs')),
    sa.ForeignKeyConstraint(['version_id'], ['versions.id'], name=op.f('fk_version_files_version_id_versions')),
    sa.PrimaryKeyConstraint('version_id', 'path', name=op.f('pk_version_files'))
    )
    with op.batch_alter_table('version_files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_version_files_blob_sha256'), ['blob_sha256'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.drop_constraint('fk_adapters_latest_version', type_='foreignkey')
    with op.batch_alter_table('version_files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_version_files_blob_sha256'))

    op.drop_table('version_files')
    with op.batch_alter_table('versions', schema=None) as batch_op:
        batch_op.drop_index('ix_versions_base_model_hash')

    op.drop_table('versions')
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tokens_user_id'))

    op.drop_table('tokens')
    with op.batch_alter_table('public_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_public_keys_user_id'))

    op.drop_table('public_keys')
    op.drop_table('memberships')
    op.drop_table('lfs_uploads')
    with op.batch_alter_table('adapter_tags', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_adapter_tags_tag'))

    op.drop_table('adapter_tags')
    op.drop_table('users')
    with op.batch_alter_table('adapters', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_adapters_updated_at'))
        batch_op.drop_index(batch_op.f('ix_adapters_task'))
        batch_op.drop_index(batch_op.f('ix_adapters_head_type'))
        batch_op.drop_index(batch_op.f('ix_adapters_downloads'))
        batch_op.drop_index(batch_op.f('ix_adapters_base_model_name'))
        batch_op.drop_index(batch_op.f('ix_adapters_base_model_hash'))

    op.drop_table('adapters')
    op.drop_table('namespaces')
    op.drop_table('blobs')
