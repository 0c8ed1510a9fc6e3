"""baseline of the local registry's tables (artifacts, artifact_builds)

The local registry (registry/store.py) creates its tables with create_all when it opens a
database; this revision does the same for a database that only the service has touched,
so `cubinforge db upgrade` leaves a complete schema either way. It is a baseline: it
creates what registry/models.py defines when first applied and skips tables that exist.
Any later change to those models needs its own revision here.

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-29
"""
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from cubinforge.registry.models import Base
    Base.metadata.create_all(bind=op.get_bind(), checkfirst=True)


def downgrade() -> None:
    pass  # the registry's data is not the service's to drop
