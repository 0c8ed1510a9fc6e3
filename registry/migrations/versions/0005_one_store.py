"""one store: the service's published variants move into `artifacts`; `service_variants` goes

Until now the service kept its own table of published variants beside the local registry's
`artifacts`. Both now read and write `artifacts`, which gains what only the service had: the
manifest exactly as published (`manifest_json`, what signatures cover), the verified signer
key ids (`signed_by`), `yank_reason` and `publisher`. Each service row is copied over; where a
local build has the same name, the published row replaces it (it is what clients verified
and downloaded). `scheduler` widens to the 64 characters publish accepts, `cubin_size` to
BIGINT. The copy is written out here, not imported, so it stays what it was.

Downgrade recreates `service_variants` from the rows that have a published manifest.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
import json
import math
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_AXIS_COLUMNS = ("arch", "dtype", "head_dim", "causal", "varlen", "paged_kv", "pack_gqa", "split_kv",
                 "scheduler", "tile_m", "tile_n")


def _str(v, n: int, default=""):
    return v if isinstance(v, str) and len(v) <= n else default


def _utc(v):
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=timezone.utc)
    return None


def _columns(m: dict, published_at) -> dict:
    """The artifact row of a published manifest (the columns are index copies of the manifest)."""
    axes, meta, prov = m.get("axes") or {}, m.get("metadata") or {}, m.get("provenance") or {}
    try:
        built = datetime.fromisoformat(prov.get("built_at"))
    except (TypeError, ValueError):
        built = published_at
    secs = prov.get("build_seconds")
    regs = meta.get("registers")
    row = {c: axes.get(c) for c in _AXIS_COLUMNS}
    row.update(
        family=m["family"], axes=axes, cubin_sha256=m["cubin"]["sha256"], cubin_size=m["cubin"]["size"],
        entry=str(meta.get("entry") or (m.get("contract") or {}).get("entry") or "")[:512],
        registers=regs if isinstance(regs, int) and 0 <= regs < 2**31 else None,
        metadata=meta, contract=m.get("contract") or {}, provenance=prov,
        source_sha256=_str(prov.get("rendered_source_sha256"), 64), template=_str(prov.get("template"), 256),
        dsl_version=_str(prov.get("dsl_version"), 32), ptxas_version=_str(prov.get("ptxas_version"), 64, None),
        compile_options=_str(prov.get("compile_options"), 1 << 20), content_key=_str(prov.get("content_key"), 64),
        built_at=_utc(built) or published_at,
        build_seconds=float(secs) if isinstance(secs, (int, float)) and math.isfinite(secs) else 0.0)
    return row


def upgrade() -> None:
    with op.batch_alter_table("artifacts") as t:
        t.add_column(sa.Column("yank_reason", sa.String(500), nullable=True))
        t.add_column(sa.Column("manifest_json", sa.Text, nullable=True))
        t.add_column(sa.Column("signed_by", sa.Text, nullable=False, server_default=""))
        t.add_column(sa.Column("publisher", sa.String(128), nullable=True))
        t.alter_column("scheduler", type_=sa.String(64), existing_type=sa.String(32), existing_nullable=True)
        t.alter_column("cubin_size", type_=sa.BigInteger, existing_type=sa.Integer, existing_nullable=False)
    bind = op.get_bind()
    md = sa.MetaData()
    art = sa.Table("artifacts", md, autoload_with=bind)
    builds = sa.Table("artifact_builds", md, autoload_with=bind)
    sv = sa.Table("service_variants", md, autoload_with=bind)
    for r in bind.execute(sa.select(sv)).mappings().all():
        manifest = json.loads(r["manifest_json"])
        at = _utc(r["published_at"]) or datetime.now(timezone.utc)
        row = _columns(manifest, at)
        row.update(yanked=bool(r["yanked"]), yank_reason=r["yank_reason"], manifest_json=r["manifest_json"],
                   signed_by=r["signed_by"] or "", publisher=r["publisher"], updated_at=at)
        have = bind.execute(sa.select(art.c.id).where(art.c.name == r["name"])).scalar()
        if have is None:
            have = bind.execute(art.insert().values(name=r["name"], created_at=at, **row)).inserted_primary_key[0]
        else:
            bind.execute(art.update().where(art.c.id == have).values(created_at=at, **row))
        bind.execute(builds.insert().values(artifact_id=have, name=r["name"], cubin_sha256=row["cubin_sha256"],
                                            source_sha256=row["source_sha256"], content_key=row["content_key"],
                                            manifest=manifest, created_at=at))
    for ix in ("yanked", "sha256", "arch", "family"):
        op.drop_index(f"ix_service_variants_{ix}", "service_variants")
    op.drop_table("service_variants")


def downgrade() -> None:
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
        sa.Column("signed_by", sa.Text, nullable=False),
        sa.Column("yanked", sa.Boolean, nullable=False),
        sa.Column("yank_reason", sa.String(500), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("publisher", sa.String(128), nullable=True),
    )
    for ix in ("family", "arch", "sha256", "yanked"):
        op.create_index(f"ix_service_variants_{ix}", "service_variants", [ix])
    bind = op.get_bind()
    md = sa.MetaData()
    art = sa.Table("artifacts", md, autoload_with=bind)
    sv = sa.Table("service_variants", md, autoload_with=bind)
    for r in bind.execute(sa.select(art).where(art.c.manifest_json.is_not(None))).mappings().all():
        bind.execute(sv.insert().values(
            name=r["name"], family=r["family"], arch=r["arch"], dtype=r["dtype"], head_dim=r["head_dim"],
            causal=r["causal"], axes=r["axes"], sha256=r["cubin_sha256"], size=r["cubin_size"],
            manifest_json=r["manifest_json"], signed_by=r["signed_by"], yanked=r["yanked"],
            yank_reason=r["yank_reason"], published_at=r["created_at"], publisher=r["publisher"]))
        bind.execute(art.delete().where(art.c.id == r["id"]))
    with op.batch_alter_table("artifacts") as t:
        t.drop_column("publisher")
        t.drop_column("signed_by")
        t.drop_column("manifest_json")
        t.drop_column("yank_reason")
        t.alter_column("scheduler", type_=sa.String(32), existing_type=sa.String(64), existing_nullable=True)
        t.alter_column("cubin_size", type_=sa.Integer, existing_type=sa.BigInteger, existing_nullable=False)
