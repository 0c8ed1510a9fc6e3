"""The local registry: put, get, list with filters, manifests, blobs, yank, history."""

import hashlib
import json

import pytest

from cubinforge.registry import ArtifactInput, Registry
from cubinforge.registry.blobstore import BlobStore


def _input(name="fa3-fwd-sm_90a-bf16-hd128-causal", dtype="bf16", causal=True, cubin=b"\x7fELF fake cubin", key="k1"):
    axes = {"arch": "sm_90a", "dtype": dtype, "head_dim": 128, "causal": causal, "varlen": False, "paged_kv": False,
            "pack_gqa": False, "split_kv": False, "scheduler": "single", "tile_m": 128, "tile_n": 128}
    return ArtifactInput(
        name=name, family="fa3_fwd", axes=axes, cubin=cubin,
        metadata={"entry": "kern", "registers": 168, "static_smem_bytes": 1024, "dynamic_smem_bytes": 164864},
        contract={"contract_version": 1, "variant": name, "entry": "kern", "params": []},
        source="# rendered\n", template="templates/fa3_fwd_variant.py.j2", dsl_version="4.8.1",
        ptxas_version="12.9", compile_options="--gpu-arch sm_90a --keep-cubin", content_key=key, build_seconds=1.25,
    )


def test_round_trip_manifest_and_blobs(home):
    reg = Registry()
    assert reg.home == home
    rec = reg.put_artifact(_input())
    sha = hashlib.sha256(b"\x7fELF fake cubin").hexdigest()
    assert rec["cubin"] == {"sha256": sha, "size": 15}
    assert reg.blob_path(sha) == home / "blobs" / "sha256" / sha[:2] / sha
    assert hashlib.sha256(reg.blob_path(sha).read_bytes()).hexdigest() == sha
    with reg.open_blob(sha) as f:
        assert f.read() == b"\x7fELF fake cubin"

    got = reg.get("fa3-fwd-sm_90a-bf16-hd128-causal")
    assert got["axes"]["head_dim"] == 128 and got["metadata"]["registers"] == 168
    assert got["provenance"]["content_key"] == "k1" and got["provenance"]["dsl_version"] == "4.8.1"
    src = got["provenance"]["rendered_source_sha256"]
    assert reg.read_blob(src) == b"# rendered\n"

    manifest = json.loads((home / "manifests" / "fa3-fwd-sm_90a-bf16-hd128-causal.json").read_text())
    assert list(manifest) == ["manifest_version", "variant", "family", "axes", "cubin", "contract", "metadata", "provenance"]
    assert manifest["manifest_version"] == 1 and manifest["cubin"]["sha256"] == sha
    assert set(manifest["provenance"]) >= {"dsl_version", "ptxas_version", "compile_options", "content_key", "built_at",
                                           "build_seconds", "rendered_source_sha256", "template", "python"}
    assert reg.get("nope") is None


def test_list_filters_pagination_and_replacement(home):
    reg = Registry()
    reg.put_artifact(_input())
    reg.put_artifact(_input(name="fa3-fwd-sm_90a-bf16-hd128-noncausal", causal=False, cubin=b"b"))
    reg.put_artifact(_input(name="fa3-fwd-sm_90a-fp16-hd128-causal", dtype="fp16", cubin=b"c"))
    assert [r["name"] for r in reg.list({"dtype": "bf16"})] == [
        "fa3-fwd-sm_90a-bf16-hd128-causal", "fa3-fwd-sm_90a-bf16-hd128-noncausal"]
    assert len(reg.list({"causal": True})) == 2
    assert len(reg.list({"dtype": ["bf16", "fp16"], "head_dim": 128})) == 3
    assert [r["name"] for r in reg.list(limit=1, offset=1)] == ["fa3-fwd-sm_90a-bf16-hd128-noncausal"]
    assert reg.count({"family": "fa3_fwd"}) == 3
    with pytest.raises(ValueError, match="cannot filter"):
        reg.list({"colour": "red"})
    # one current artifact per name; the history keeps both
    reg.put_artifact(_input(cubin=b"new cubin", key="k2"))
    assert reg.count() == 3
    assert reg.get("fa3-fwd-sm_90a-bf16-hd128-causal")["content_key"] == "k2"
    assert [h["content_key"] for h in reg.history("fa3-fwd-sm_90a-bf16-hd128-causal")] == ["k1", "k2"]


def test_yank_hides_and_removes_manifest(home):
    reg = Registry()
    reg.put_artifact(_input())
    path = home / "manifests" / "fa3-fwd-sm_90a-bf16-hd128-causal.json"
    reg.yank("fa3-fwd-sm_90a-bf16-hd128-causal")
    assert not path.exists() and reg.list() == [] and len(reg.list(include_yanked=True)) == 1
    assert reg.get("fa3-fwd-sm_90a-bf16-hd128-causal")["yanked"] is True
    reg.yank("fa3-fwd-sm_90a-bf16-hd128-causal", yanked=False)
    assert path.exists() and len(reg.list()) == 1
    with pytest.raises(KeyError):
        reg.yank("nope")


def test_database_url_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("CUBINFORGE_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("CUBINFORGE_DATABASE_URL", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    Registry().put_artifact(_input())
    assert (tmp_path / "elsewhere.db").exists() and not (tmp_path / "h" / "registry.db").exists()


def test_blobstore_atomic_and_verified(tmp_path):
    store = BlobStore(tmp_path)
    sha = store.put(b"abc")
    assert store.read(sha) == b"abc" and store.put(b"abc") == sha
    assert not list(store.path(sha).parent.glob("*.tmp"))
    store.path(sha).write_bytes(b"abd")
    with pytest.raises(IOError, match="corrupt"):
        store.read(sha)
    with pytest.raises(ValueError):
        store.path("../etc/passwd")
