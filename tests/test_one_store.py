"""One store (issue 9): the service reads and writes the registry's tables, blobs and manifests,
and a database the service made before (revision 0004, its own `service_variants`) upgrades
into it without losing a published manifest, a signature, a yank, a token or the audit log."""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timezone

import pytest

pytest.importorskip("alembic")

from sqlalchemy import MetaData, Table, create_engine, inspect, select  # noqa: E402

from cubinforge.service.testing import backend_url, backends, make_cubin, make_manifest  # noqa: E402


def _old_service_database(url: str, home) -> dict:
    """What the service before this change left: revision 0004, a published (signed) variant, a
    yanked one, a local build that shares a name with a published one, a token and an audit row."""
    from cubinforge.registry.migrate import upgrade
    from cubinforge.service.auth import hash_token

    upgrade(url, "0004")
    eng = create_engine(url)
    md = MetaData()
    sv, art = Table("service_variants", md, autoload_with=eng), Table("artifacts", md, autoload_with=eng)
    tokens, audit = Table("service_api_tokens", md, autoload_with=eng), Table("service_audit", md, autoload_with=eng)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    texts = {}
    with eng.begin() as c:
        for name, yanked in (("pub-a", False), ("pub-yanked", True), ("shared", False)):
            cubin = make_cubin(payload=name.encode())
            m = make_manifest(name, cubin, tile_m=64)
            m["provenance"] = {"generator": "tests", "template": "t" * 300, "build_seconds": "slow"}  # odd values
            m["signatures"] = [{"alg": "ed25519", "key_id": "0123456789abcdef", "sig": "AAAA"}]
            texts[name] = json.dumps(m, sort_keys=True)
            ax = m["axes"]
            c.execute(sv.insert().values(
                name=name, family=m["family"], arch=ax["arch"], dtype=ax["dtype"], head_dim=ax["head_dim"],
                causal=ax["causal"], axes=ax, sha256=m["cubin"]["sha256"], size=m["cubin"]["size"],
                manifest_json=texts[name], signed_by="0123456789abcdef", yanked=yanked,
                yank_reason="broken" if yanked else None, published_at=now, publisher="ci"))
        local = {"family": "fa3_fwd", "axes": {"arch": "sm_90a"}, "cubin_sha256": "1" * 64, "cubin_size": 9,
                 "entry": "k", "metadata": {}, "contract": {}, "source_sha256": "2" * 64, "template": "t",
                 "dsl_version": "4.8.1", "compile_options": "", "content_key": "3" * 64, "built_at": now,
                 "build_seconds": 1.0, "provenance": {}, "yanked": False, "created_at": now, "updated_at": now}
        c.execute(art.insert().values(name="shared", **local))
        c.execute(art.insert().values(name="local-only", **local))
        c.execute(tokens.insert().values(name="ci", token_sha256=hash_token("cf_secret"), created_at=now,
                                         revoked=False, scopes="family:fa3_fwd"))
        c.execute(audit.insert().values(at=now, actor="ci", action="publish", variant="pub-a", detail="d"))
    eng.dispose()
    return texts


@pytest.mark.parametrize("kind", backends())
def test_a_database_the_old_service_made_upgrades_into_the_one_store(kind, tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from cubinforge.registry import Registry
    from cubinforge.registry.blobstore import BlobStore
    from cubinforge.registry.db import Database
    from cubinforge.registry.migrate import current, head, upgrade
    from cubinforge.registry.models import ApiToken, Base
    from cubinforge.service.store import Store, audit_log

    url = backend_url(kind, tmp_path)
    texts = _old_service_database(url, tmp_path)
    upgrade(url)
    assert current(url) == head()
    eng = create_engine(url)
    with eng.connect() as c:
        assert "service_variants" not in inspect(c).get_table_names()
        diff = compare_metadata(MigrationContext.configure(c), Base.metadata)
    eng.dispose()
    assert [d for d in diff if not (d[0] == "remove_table" and d[1].name == "alembic_version")] == []

    db = Database(url)
    store = Store(BlobStore(tmp_path / "blobs"))
    with db.sessions() as s:
        a, y, shared = store.get(s, "pub-a"), store.get(s, "pub-yanked"), store.get(s, "shared")
        # The manifest comes back as the bytes that were published (signatures cover them).
        row_text = s.scalar(select(Base.metadata.tables["artifacts"].c.manifest_json)
                            .where(Base.metadata.tables["artifacts"].c.name == "pub-a"))
        assert row_text == texts["pub-a"] and a["manifest"] == json.loads(texts["pub-a"])
        assert a["signed_by"] == ["0123456789abcdef"] and a["publisher"] == "ci" and not a["yanked"]
        assert a["axes"]["tile_m"] == 64 and a["created_at"].startswith("2026-11-30T12:00")
        assert y["yanked"] and y["yank_reason"] == "broken"
        # Where a local build and a published variant shared a name, the published one is kept.
        assert shared["cubin"]["sha256"] == json.loads(texts["shared"])["cubin"]["sha256"]
        names = [r["name"] for r in store.list(s, {}, True, 100, 0)[0]]
        assert names == ["local-only", "pub-a", "pub-yanked", "shared"]
        assert [r["name"] for r in store.list(s, {"tile_m": 64}, False, 100, 0)[0]] == ["pub-a", "shared"]
        tok = s.scalar(select(ApiToken).where(ApiToken.name == "ci"))
        assert tok.scopes == "family:fa3_fwd" and not tok.revoked
        assert [(e.actor, e.action, e.variant) for e in audit_log(s)] == [("ci", "publish", "pub-a")]
        # Re-publishing the migrated artifact is the no-op it was before.
        m = json.loads(texts["pub-a"])
        created, rec = store.publish(s, m, make_cubin(payload=b"pub-a"), [], "ci")
        assert not created and rec["manifest"] == m
    db.dispose()
    # The local registry opens the same database and sees the published variants.
    reg = Registry(tmp_path, database_url=url)
    assert reg.get("pub-a")["manifest"]["signatures"][0]["key_id"] == "0123456789abcdef"
    assert [r["name"] for r in reg.list()] == ["local-only", "pub-a", "shared"]
    reg.db.dispose()


def test_a_local_registry_made_before_the_migrations_is_upgraded_when_opened(tmp_path):
    """A registry.db that create_all made (no alembic_version) gets the history replayed."""
    from cubinforge.registry import Registry
    from cubinforge.registry.migrate import current, head

    baseline = importlib.import_module("cubinforge.registry.migrations.versions.0002_registry_baseline")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    eng = create_engine(url)
    baseline._tables().create_all(eng)
    eng.dispose()
    reg = Registry(tmp_path)
    assert current(url) == head()
    assert reg.list() == []
    reg.db.dispose()


def test_service_publish_and_local_registry_share_rows_blobs_and_manifests(tmp_path):
    from cubinforge.registry import Registry
    from cubinforge.registry.blobstore import BlobStore
    from cubinforge.registry.db import Database
    from cubinforge.registry.migrate import upgrade
    from cubinforge.registry.models import Base
    from cubinforge.service.store import Store

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url)
    db, store = Database(url), Store(BlobStore(tmp_path / "blobs"))
    cubin = make_cubin(payload=b"shared-home")
    m = make_manifest("served", cubin)
    gen0 = store.generation.read()
    with db.sessions() as s:
        created, _ = store.publish(s, m, cubin, [], "ci")
    assert created and store.generation.read() != gen0
    db.dispose()
    reg = Registry(tmp_path)
    rec = reg.get("served")
    assert reg.read_blob(m["cubin"]["sha256"]) == cubin          # one blob layout
    assert reg.manifest("served") == m == rec["manifest"]        # one manifest file, as published
    assert set(Base.metadata.tables) >= {"artifacts", "service_api_tokens", "service_audit"}
    assert "service_variants" not in Base.metadata.tables        # one record type
    gen1 = reg.generation.read()
    reg.yank("served")                                           # a local yank moves the service's caches too
    assert reg.generation.read() != gen1 and not (tmp_path / "manifests" / "served.json").exists()
    reg.db.dispose()
