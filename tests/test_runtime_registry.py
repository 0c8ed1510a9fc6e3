"""Variant selection from a local registry, nearest-variant errors, blob integrity."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import manifest, write_registry  # noqa: E402

from cubinforge.runtime import (ContractError, IntegrityError, LocalSource, Source,  # noqa: E402
                                VariantNotFound, select, select_attention_variant)
from cubinforge.runtime.registry_source import fetch_cubin, load_manifest  # noqa: E402

CUBIN = b"\x7fELF pretend cubin bytes"


@pytest.fixture
def registry(tmp_path, monkeypatch):
    ms = [manifest(dtype=dt, hd=hd, causal=c, cubin=CUBIN)
          for dt in ("bf16", "fp16") for hd in (64, 128) for c in (False, True)]
    ms.append(manifest(hd=256, causal=True, varlen=True, cubin=CUBIN,
                       variant="fa3_fwd-sm_90a-bf16-hd256-causal-varlen"))
    ms.append(manifest(family="fa3_bwd", hd=128, cubin=CUBIN))
    write_registry(tmp_path, ms, [CUBIN])
    monkeypatch.setenv("CUBINFORGE_HOME", str(tmp_path))
    return tmp_path


def test_source_protocol_and_listing(registry):
    src = LocalSource()
    assert isinstance(src, Source) and src.home == registry
    assert "fa3_fwd-sm_90a-bf16-hd128-causal" in src.list()
    assert src.get("fa3_fwd-sm_90a-bf16-hd128-causal")["family"] == "fa3_fwd"


def test_select_exact(registry):
    m = select("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True})
    assert m.variant == "fa3_fwd-sm_90a-bf16-hd128-causal"
    assert m.contract.entry == "kernel_fa3_fwd" and m.axes["scheduler"] == "single"
    m2 = select("fa3_fwd", arch="sm_90a", dtype="fp16", head_dim=64, causal=False)
    assert m2.variant == "fa3_fwd-sm_90a-fp16-hd64"
    m3 = select_attention_variant("fp16", 128, True, arch="sm_90a")
    assert m3.variant == "fa3_fwd-sm_90a-fp16-hd128-causal"


def test_defaults_never_pick_special_variants(registry):
    # hd256 exists only as varlen: the plain request must not get it.
    with pytest.raises(VariantNotFound, match="varlen"):
        select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=256, causal=True)
    m = select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=256, causal=True, varlen=True)
    assert m.axes["varlen"] is True


def test_missing_variant_names_values_and_nearest(registry):
    with pytest.raises(VariantNotFound) as ei:
        select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=96, causal=True)
    msg = str(ei.value)
    assert "head_dim=96" in msg and "available: 128, 256, 64" in msg
    assert "Nearest: fa3_fwd-sm_90a-bf16-hd128-causal (differs in head_dim=128)" in msg
    assert "fa3_fwd-sm_90a-bf16-hd64-causal (differs in head_dim=64)" in msg
    with pytest.raises(VariantNotFound, match="No fa3_fwd variant has arch='sm_100a'"):
        select("fa3_fwd", arch="sm_100a", dtype="bf16", head_dim=128, causal=False)
    with pytest.raises(VariantNotFound, match="holds no fa3_fwd_paged variants"):
        select("fa3_fwd_paged", arch="sm_90a")


def test_bool_axes_are_not_ints(registry):
    with pytest.raises(VariantNotFound):
        select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=1)


def test_unasked_axes_choose_stably(tmp_path):
    a = manifest(hd=128, variant="fa3_fwd-sm_90a-bf16-hd128-b", scheduler="persistent", cubin=CUBIN)
    b = manifest(hd=128, variant="fa3_fwd-sm_90a-bf16-hd128-a", scheduler="single", cubin=CUBIN)
    write_registry(tmp_path, [a, b])
    src = LocalSource(tmp_path)
    want = dict(arch="sm_90a", dtype="bf16", head_dim=128, causal=False)
    assert select("fa3_fwd", want, source=src).variant == "fa3_fwd-sm_90a-bf16-hd128-a"
    assert select("fa3_fwd", dict(want, scheduler="persistent"), source=src).variant == "fa3_fwd-sm_90a-bf16-hd128-b"


def test_blob_verified(registry):
    m = select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=True)
    assert fetch_cubin(m, LocalSource()) == CUBIN
    sha = hashlib.sha256(CUBIN).hexdigest()
    (registry / "blobs" / "sha256" / sha[:2] / sha).write_bytes(CUBIN + b"tampered")
    with pytest.raises(IntegrityError, match=f"sha256 is [0-9a-f]{{64}}, the manifest says {sha}"):
        fetch_cubin(m, LocalSource())
    (registry / "blobs" / "sha256" / sha[:2] / sha).unlink()
    with pytest.raises(IntegrityError, match="missing"):
        fetch_cubin(m, LocalSource())


def test_broken_manifests_are_reported_not_fatal(registry):
    (registry / "manifests" / "garbage.json").write_text("{not json")
    bad = manifest(hd=64, cubin=CUBIN, variant="fa3_fwd-sm_90a-bf16-hd64-v2")
    bad["contract"]["contract_version"] = 2
    (registry / "manifests" / "fa3_fwd-sm_90a-bf16-hd64-v2.json").write_text(json.dumps(bad))
    assert select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=64, causal=False)
    with pytest.raises(VariantNotFound, match=r"2 manifest\(s\) could not be read: .*contract_version 2"):
        select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=32, causal=False)


def test_manifest_cross_checks():
    m = manifest(cubin=CUBIN)
    m["metadata"]["param_table"][1]["size"] = 48
    with pytest.raises(ContractError, match="differ from the cubin's parameter table"):
        load_manifest(m)
    m = manifest(cubin=CUBIN)
    m["metadata"]["dynamic_smem_bytes"] = 1
    with pytest.raises(ContractError, match="metadata.dynamic_smem_bytes"):
        load_manifest(m)
    m = manifest(cubin=CUBIN)
    m["manifest_version"] = 7
    with pytest.raises(ContractError, match="manifest_version 7"):
        load_manifest(m)
    m = manifest(cubin=CUBIN)
    m["cubin"]["sha256"] = "../../etc/passwd"
    with pytest.raises(ContractError, match="64 hex"):
        load_manifest(m)
