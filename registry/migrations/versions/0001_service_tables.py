"""service tables: published variants and API tokens

Revision ID: 0001
Revises:
Create Date: 2025-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "service_variants",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("arch", sa.String(16), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("head_dim", sa.Integer, nullable=False),
        sa.Column("causal", sa.Boolean, nullable=False),
        sa.Column("axes", sa.JSON, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("manifest_json", sa.Text, nullable=False),
        sa.Column("signed_by", sa.String(400), nullable=False),
        sa.Column("yanked", sa.Boolean, nullable=False),
        sa.Column("yank_reason", sa.String(500), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("publisher", sa.String(128), nullable=True),
    )
    op.create_index("ix_service_variants_family", "service_variants", ["family"])
    op.create_index("ix_service_variants_arch", "service_variants", ["arch"])
    op.create_index("ix_service_variants_sha256", "service_variants", ["sha256"])
    op.create_index("ix_service_variants_yanked", "service_variants", ["yanked"])
    op.create_table(
        "service_api_tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("service_api_tokens")
    op.drop_index("ix_service_variants_yanked", "service_variants")
    op.drop_index("ix_service_variants_sha256", "service_variants")
    op.drop_index("ix_service_variants_arch", "service_variants")
    op.drop_index("ix_service_variants_family", "service_variants")
    op.drop_table("service_variants")
