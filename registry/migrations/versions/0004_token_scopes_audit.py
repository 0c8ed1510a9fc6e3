"""token scopes and the audit table of writes

Existing tokens get the scope "admin": they could write anything before, and a migration
must not lock an operator's CI out. New tokens are given scopes explicitly
(`cubinforge token add NAME --scope ...`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("service_api_tokens") as t:
        t.add_column(sa.Column("scopes", sa.Text, nullable=False, server_default="admin"))
    op.create_table(
        "service_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("variant", sa.String(128), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
    )
    op.create_index("ix_service_audit_at", "service_audit", ["at"])
    op.create_index("ix_service_audit_variant", "service_audit", ["variant"])


def downgrade() -> None:
    op.drop_index("ix_service_audit_variant", "service_audit")
    op.drop_index("ix_service_audit_at", "service_audit")
    op.drop_table("service_audit")
    with op.batch_alter_table("service_api_tokens") as t:
        t.drop_column("scopes")
