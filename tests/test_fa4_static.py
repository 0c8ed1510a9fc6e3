"""The SM100 family on the CPU: what can be proved about cubins that have never run.

Two variants are cross-compiled through the real build pipeline (contract checked against
EIATTR_KPARAM_INFO, static checks inside compile_variant), then checked again here from the
registry: SASS instruction evidence, no spills, resources within SM100 limits, contract grid and
cluster against the kernel, and the verification stamp that keeps launchers from using them.
Nothing here runs a kernel: there is no Blackwell GPU.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import module_available

pytestmark = pytest.mark.skipif(
    not all(module_available(m) for m in ("cutlass", "elftools", "sqlalchemy")),
    reason="needs the build extra (nvidia-cutlass-dsl, pyelftools, sqlalchemy)")

VARIANTS = ["fa4-fwd-sm_100a-bf16-hd128-causal", "fa4-fwd-sm_100a-fp16-hd64-noncausal"]


@pytest.fixture(scope="module")
def fa4_registry(tmp_path_factory):
    from cubinforge.generator import build, spec
    from cubinforge.registry import Registry

    reg = Registry(home=tmp_path_factory.mktemp("fa4-home"))
    outcomes = build.build([spec.parse_name(n) for n in VARIANTS], reg, jobs=2, progress=False)
    assert all(o.status == "built" for o in outcomes), build.summary(outcomes)
    return reg


def _manifest(reg, name):
    return json.loads((reg.manifests_dir / f"{name}.json").read_text())


def _cfg(m):
    from cubinforge.generator.kernels.fa4_fwd_sm100.config import FwdConfig

    ax = m["axes"]
    return FwdConfig(ax["arch"], ax["dtype"], ax["head_dim"], ax["causal"], ax["tile_m"], ax["tile_n"])


@pytest.mark.parametrize("name", VARIANTS)
def test_static_checks_pass_on_the_built_cubin(fa4_registry, name):
    from cubinforge.generator.kernels.fa4_fwd_sm100.checks import problems

    m = _manifest(fa4_registry, name)
    cubin = fa4_registry.read_blob(m["cubin"]["sha256"])
    c = m["contract"]
    assert problems(cubin, _cfg(m), c["dynamic_smem_bytes"], tuple(c["block"])) == []


@pytest.mark.parametrize("name", VARIANTS)
def test_sass_evidence_and_resources_in_the_manifest(fa4_registry, name):
    from cubinforge.generator.kernels.fa4_fwd_sm100.config import REGISTER_LIMIT, SMEM_LIMIT, TMEM_COLUMNS

    m = _manifest(fa4_registry, name)
    meta, cfg = m["metadata"], _cfg(m)
    sass = meta["sass"]
    assert sass["hgmma"] == 0 and sass["ldl"] == 0 and sass["stl"] == 0
    assert sass["utchmma"] == cfg.head_dim // 16 + cfg.tile_n // 16  # S = Q K^T, then O += P V
    assert sass["tmem_alloc"] >= 1 and sass["tmem_dealloc"] >= 1 and sass["ldtm"] > 0 and sass["sttm"] > 0
    assert sass["utmaldg"] == 3 * cfg.head_dim // 64 and sass["utmastg"] == cfg.head_dim // 64
    assert meta["spill_store_bytes"] == 0 and meta["spill_load_bytes"] == 0 and meta["stack_frame_bytes"] == 0
    assert meta["registers"] <= min(REGISTER_LIMIT, 65536 // meta["max_threads"])
    assert meta["dynamic_smem_bytes"] + meta["static_smem_bytes"] <= SMEM_LIMIT
    assert meta["kernel"]["tmem_columns"] <= TMEM_COLUMNS
    assert meta["arch"] == "sm_100a"


@pytest.mark.parametrize("name", VARIANTS)
def test_contract_grid_and_cluster_agree_with_the_kernel(fa4_registry, name):
    from cubinforge.runtime.contract import evaluate, load_contract

    m = _manifest(fa4_registry, name)
    c = m["contract"]
    cfg = _cfg(m)
    # The kernel: one CTA per (tile_m rows, head, batch), block of its warps, no cluster.
    assert c["cluster"] == [1, 1, 1] == m["metadata"]["cluster"]
    assert c["block"] == [cfg.threads, 1, 1] == [m["metadata"]["max_threads"], 1, 1]
    contract = load_contract(c)
    for sq, hq, b in ((1, 1, 1), (128, 4, 2), (129, 32, 3), (8192, 16, 1)):
        sym = {"seqlen_q": sq, "heads_q": hq, "batch": b}
        grid = [evaluate(g, sym.__getitem__) for g in contract.grid]
        assert grid == [-(-sq // cfg.tile_m), hq, b]
    # The parameter table the pipeline compared with the contract is the cubin's.
    table = [(p["ordinal"], p["offset"], p["size"]) for p in m["metadata"]["param_table"]]
    assert table == [(p["ordinal"], p["offset"], p["size"]) for p in c["params"]]


def test_every_fa4_manifest_is_unverified_and_refused(fa4_registry):
    from cubinforge.runtime import Kernel, UnverifiedVariant, load_manifest
    from cubinforge.runtime.registry_source import refuses_unverified

    for name in VARIANTS:
        m = _manifest(fa4_registry, name)
        v = m["provenance"]["verification"]
        assert v["status"] == "unverified" and v["arch_verified"] is False
        assert "has ever been run on a GPU" in v["reason"] and refuses_unverified(v)
        with pytest.raises(UnverifiedVariant, match="CUBINFORGE_ALLOW_UNVERIFIED=1"):
            Kernel(load_manifest(m), b"")


def test_the_checks_reject_a_cubin_that_is_not_the_design(demo_registry):
    """A real sm_100a cubin of another kernel (the demo) fails the checks, each for its reason."""
    from cubinforge.generator.kernels.fa4_fwd_sm100.checks import problems
    from cubinforge.generator.kernels.fa4_fwd_sm100.config import FwdConfig

    m = json.loads((demo_registry.manifests_dir / "demo-scale-sm_100a-bf16.json").read_text())
    found = problems(demo_registry.read_blob(m["cubin"]["sha256"]), FwdConfig("sm_100a", "bf16", 128, False),
                     1024, (384, 1, 1))
    text = "\n".join(found)
    for why in ("UTCHMMA by A operand", "UTMALDG, expected 6", "no TMEM allocation", "setmaxnreg",
                "never reads ['SR_CTAID.Y', 'SR_CTAID.Z']"):
        assert why in text, text
