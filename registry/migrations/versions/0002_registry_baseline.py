"""baseline of the local registry's tables (artifacts, artifact_builds)

The local registry used to create its tables with create_all; this revision does the same
for a database that only the service had touched, so every database has them. The tables are
written out here as they were at this revision (not imported from the models, which move on:
later changes are later revisions), and tables that exist already are skipped.

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _tables() -> sa.MetaData:
    md = sa.MetaData()
    tz = sa.DateTime(timezone=True)
    sa.Table(
        "artifacts", md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True, index=True),
        sa.Column("family", sa.String(64), nullable=False, index=True),
        sa.Column("arch", sa.String(16), index=True), sa.Column("dtype", sa.String(16), index=True),
        sa.Column("head_dim", sa.Integer, index=True), sa.Column("causal", sa.Boolean),
        sa.Column("varlen", sa.Boolean), sa.Column("paged_kv", sa.Boolean), sa.Column("pack_gqa", sa.Boolean),
        sa.Column("split_kv", sa.Boolean), sa.Column("scheduler", sa.String(32)),
        sa.Column("tile_m", sa.Integer), sa.Column("tile_n", sa.Integer),
        sa.Column("axes", sa.JSON, nullable=False),
        sa.Column("cubin_sha256", sa.String(64), nullable=False, index=True),
        sa.Column("cubin_size", sa.Integer, nullable=False),
        sa.Column("entry", sa.String(512), nullable=False), sa.Column("registers", sa.Integer),
        sa.Column("metadata", sa.JSON, nullable=False), sa.Column("contract", sa.JSON, nullable=False),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("template", sa.String(256), nullable=False),
        sa.Column("dsl_version", sa.String(32), nullable=False), sa.Column("ptxas_version", sa.String(64)),
        sa.Column("compile_options", sa.Text, nullable=False),
        sa.Column("content_key", sa.String(64), nullable=False, index=True),
        sa.Column("built_at", tz, nullable=False), sa.Column("build_seconds", sa.Float, nullable=False),
        sa.Column("provenance", sa.JSON, nullable=False),
        sa.Column("yanked", sa.Boolean, nullable=False, index=True),
        sa.Column("created_at", tz, nullable=False), sa.Column("updated_at", tz, nullable=False),
    )
    sa.Table(
        "artifact_builds", md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("artifact_id", sa.Integer, sa.ForeignKey("artifacts.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("name", sa.String(200), nullable=False, index=True),
        sa.Column("cubin_sha256", sa.String(64), nullable=False),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("content_key", sa.String(64), nullable=False),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("created_at", tz, nullable=False),
    )
    return md


def upgrade() -> None:
    _tables().create_all(bind=op.get_bind(), checkfirst=True)


def downgrade() -> None:
    pass  # the registry's data is not this revision's to drop
