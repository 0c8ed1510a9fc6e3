"""service_variants.signed_by: VARCHAR(400) -> TEXT

The number of signatures per variant is capped in code (publish.MAX_SIGNATURES); the column
no longer imposes a second, smaller limit that overflowed into a 500 on PostgreSQL.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("service_variants") as t:
        t.alter_column("signed_by", type_=sa.Text, existing_type=sa.String(400), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("service_variants") as t:
        t.alter_column("signed_by", type_=sa.String(400), existing_type=sa.Text, existing_nullable=False)
