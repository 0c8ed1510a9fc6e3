"""The short-prefill overlap switches (issue 10): their rules, the A/B set that times them
against the shipped short-cell builds, and (slow) the SASS fact the deferred O store rests on."""

from __future__ import annotations

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import SMEM_LIMIT

BF16 = dict(arch="sm_90a", dtype="bf16")


def test_q_double_buffer_needs_a_persistent_cta_with_its_own_o_buffer():
    with pytest.raises(ValueError, match="q_double_buffer"):
        FwdConfig(**BF16, head_dim=128, causal=True, scheduler="lpt", separate_o_smem=True, q_double_buffer=True)
    with pytest.raises(ValueError, match="q_double_buffer"):
        FwdConfig(**BF16, head_dim=128, causal=False, scheduler="persistent", separate_o_smem=False,
                  q_double_buffer=True)
    with pytest.raises(ValueError, match="deferred_o_store needs q_double_buffer"):
        FwdConfig(**BF16, head_dim=128, causal=False, scheduler="persistent", q_double_buffer=False,
                  deferred_o_store=True)


@pytest.mark.parametrize("hd", [64, 96, 128])
def test_a_second_q_stage_is_counted_and_fits_up_to_hd128(hd):
    one = FwdConfig(**BF16, head_dim=hd, causal=False, scheduler="persistent", separate_o_smem=True,
                    q_double_buffer=False, deferred_o_store=False)
    two = FwdConfig(**BF16, head_dim=hd, causal=False, scheduler="persistent", separate_o_smem=True,
                    q_double_buffer=True)
    assert two.smem_bytes - one.smem_bytes == one.tile_m * hd * 2
    assert two.smem_bytes <= SMEM_LIMIT


def test_short_overlap_starts_from_the_shipped_builds_and_labels_what_is_on():
    """Each short-cell build shipped when the set was timed (config.TUNED's switches for that
    key, less what session 5 promoted from that run) is a row, and every candidate is that row
    plus exactly what its label names."""
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    rows = EXPERIMENTS["short-overlap"]
    names = [ab_name(experiment_config(o), label) for label, o in rows]
    assert len(set(names)) == len(names), names
    shipped = 0
    for label, o in rows:
        cfg = experiment_config(o)
        assert cfg.q_double_buffer == ("q-double-buffer" in label), label
        assert cfg.deferred_o_store == ("deferred-o" in label), label
        assert cfg.wg_epilogue == ("wg-epilogue" in label), label
        assert cfg.stages == (3 if "stages-3" in label else 2), label
        if "q-double-buffer" not in label and "stages-3" not in label:
            tuned = FwdConfig(**BF16, head_dim=cfg.head_dim, causal=cfg.causal, scheduler=cfg.scheduler,
                              tile_m=cfg.tile_m, tile_n=cfg.tile_n, q_double_buffer=False,
                              deferred_o_store=False, stages=0, warp_o_store=False, causal_order="all")
            # the build the dispatcher shipped for these cells (check9/n4 promoted the warp store since,
            # check13 the sectioned causal walk)
            assert cfg == tuned, label
            shipped += 1
    assert shipped == 5
    cells = {(experiment_config(o).head_dim, experiment_config(o).causal) for _, o in rows}
    assert cells == {(64, True), (64, False), (128, True), (128, False)}


def _first_store_context(sass: str) -> dict:
    """Around the first O store (UTMASTG) of the kernel: the HGMMA issued last before it (a QK^T
    or a PV, which reads P from registers and V transposed: `tnspB`), and whether a
    WARPGROUP.DEPBAR (a wait for the GEMMs) lies between that HGMMA and the store."""
    lines = [ln.split(";")[0] for ln in sass.splitlines() if "/*" in ln and "*/" in ln]
    store = next(i for i, ln in enumerate(lines) if "UTMASTG" in ln)
    gemm = max(i for i in range(store) if "HGMMA" in lines[i])
    return {"last_gemm_is_pv": "tnspB" in lines[gemm],
            "wait_between": any("WARPGROUP.DEPBAR" in ln for ln in lines[gemm:store]),
            "wait_after": any("WARPGROUP.DEPBAR" in ln for ln in lines[store:store + 200])}


@pytest.mark.slow
def test_deferred_o_store_runs_under_the_next_tiles_first_qk():
    """Without the switch the first O store follows the last PV GEMM and its wait; with it, the
    store is issued between a tile's first QK^T and the wait for it, no spills either way."""
    pytest.importorskip("cutlass")
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant
    from cubinforge.generator.sass import counts_of, cuobjdump, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip nvidia-cuda-cuobjdump)")
    ctx = {}
    for deferred in (False, True):
        cfg = FwdConfig(**BF16, head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True,
                        q_double_buffer=True, deferred_o_store=deferred)
        sass = cuobjdump(["-sass"], compile_variant(cfg).cubin)
        counts = counts_of(sass)
        assert counts["ldl"] == 0 and counts["stl"] == 0, counts
        ctx[deferred] = _first_store_context(sass)
    assert ctx[False]["last_gemm_is_pv"] and ctx[False]["wait_between"], ctx
    assert not ctx[True]["last_gemm_is_pv"] and not ctx[True]["wait_between"] and ctx[True]["wait_after"], ctx
