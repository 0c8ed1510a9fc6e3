"""FwdConfig.p_scale_log2 (e4m3's P shifted by 2^k before its rounding): the switch's bounds,
bench.ab's fp8-p-scale set, and the numpy emulation of the kernel's P rounding
(bench/fp8_p_emulate.py) that says what the shift does to the error."""

from __future__ import annotations

import numpy as np
import pytest

E4M3_HD128 = dict(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, scheduler="persistent",
                  v_layout="colmajor", tile_m=128, tile_n=192)


def test_p_scale_bounds_are_checked():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    assert FwdConfig(**E4M3_HD128).p_scale_log2 == 0.0  # shipped: no shift
    assert FwdConfig(**E4M3_HD128, rescale_threshold=4.0, p_scale_log2=4.0).p_scale_log2 == 4.0
    assert FwdConfig(**E4M3_HD128, rescale_threshold=0.0, p_scale_log2=8.0).p_scale_log2 == 8.0
    # The shipped threshold 8 already lets P reach 2^8: no room for a shift under e4m3's 448.
    with pytest.raises(ValueError, match=r"whole number in \[0, 0\]"):
        FwdConfig(**E4M3_HD128, p_scale_log2=1.0)
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        FwdConfig(**E4M3_HD128, rescale_threshold=4.0, p_scale_log2=5.0)
    with pytest.raises(ValueError, match="whole number"):
        FwdConfig(**E4M3_HD128, rescale_threshold=0.0, p_scale_log2=2.5)
    with pytest.raises(ValueError, match="whole number"):
        FwdConfig(**E4M3_HD128, rescale_threshold=0.0, p_scale_log2=-1.0)
    with pytest.raises(ValueError, match="whole number"):
        FwdConfig(**E4M3_HD128, rescale_threshold=0.0, p_scale_log2=float("inf"))
    with pytest.raises(ValueError, match="e4m3 only"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, p_scale_log2=4.0)
    with pytest.raises(ValueError, match="dense forward only"):
        FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=True, tile_m=64, pack_gqa=True,
                  paged_kv=True, split_kv=True, p_scale_log2=4.0)


def test_p_scale_set_starts_from_the_shipped_configs():
    """Each base of bench.ab's fp8-p-scale set is the FwdConfig its shipped set builds (the
    default set's e4m3 hd128 and hd256, SET=fp8's row-major hd128), and each p-scale row
    differs from its base in rescale_threshold, p_scale_log2 and a tile its label names."""
    from dataclasses import replace

    from cubinforge.bench.ab import EXPERIMENTS, FP8_P_SCALE_BASES, ab_name, experiment_config
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    shipped = {
        "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor+tile-128x192+in-order-sum+lazy-rescale-8":
            FwdConfig(**E4M3_HD128, fp8_p_pair_shuffle=False),  # TUNED_FP8 gained it after this set
        "fa3-fwd-sm_90a-e4m3-hd128-noncausal+v-rowmajor+tile-128x224":
            FwdConfig(**dict(E4M3_HD128, v_layout="rowmajor", tile_n=224)),
        "fa3-fwd-sm_90a-e4m3-hd256-noncausal-colmajor+tile-128x128":
            FwdConfig(**dict(E4M3_HD128, head_dim=256, tile_n=128)),
    }
    rows = {ab_name(experiment_config(o), label): (label, experiment_config(o))
            for label, o in EXPERIMENTS["fp8-p-scale"]}
    assert {n.split("+", 1)[1] for n in shipped} == set(FP8_P_SCALE_BASES)
    for name, want in shipped.items():
        assert rows[name][1] == want, name
    scaled = [(n, lc) for n, lc in rows.items() if "p-scale" in n]
    assert len(scaled) == 6
    for name, (label, c) in scaled:
        base = shipped[next(b for b in shipped if b.split("+", 1)[0] == name.split("+", 1)[0])]  # same variant
        assert replace(c, rescale_threshold=base.rescale_threshold, p_scale_log2=0.0, tile_n=base.tile_n) == base, name
        assert c.tile_n == base.tile_n or label.startswith(f"tile-128x{c.tile_n}+"), name
        assert f"p-scale-{int(c.p_scale_log2)}" in label
        assert (f"lazy-rescale-{int(c.rescale_threshold)}" in label) == (c.rescale_threshold > 0)
        assert c.rescale_threshold + c.p_scale_log2 <= 8.0


def _inputs(outliers: bool, s: int = 512, d: int = 128, seed: int = 0):
    from cubinforge.bench.fp8_reference import outlier_inputs

    rng = np.random.default_rng(seed)
    if outliers:
        return outlier_inputs(rng, 1, s, 1, d), outlier_inputs(rng, 1, s, 1, d), rng.standard_normal((1, s, 1, d))
    return tuple(rng.standard_normal((1, s, 1, d)) for _ in range(3))


@pytest.mark.parametrize("threshold,k", [(0.0, 0.0), (8.0, 0.0), (4.0, 4.0), (0.0, 8.0)])
def test_emulated_loop_is_exact_without_p_rounding(threshold, k):
    """The emulation's bookkeeping (stale maximum per warp, shifted P, fp32 row sum) gives
    attention itself when P is not rounded: the shift and the stale maximum cancel in O."""
    from cubinforge.bench.fp8_p_emulate import emulate
    from cubinforge.bench.fp8_reference import attention

    q, k_, v = _inputs(outliers=True)
    o = emulate(q, k_, v, 192, threshold, k, round_p=False)
    assert np.abs(o - attention(q, k_, v)).max() < 1e-6


def test_shifted_p_rounds_with_less_error_than_the_stale_maximum():
    """On FA3's outlier inputs, P's e4m3 rounding alone (inputs unquantised): the shipped
    threshold 8 (a stale maximum leaves a row's largest P inexact) errs more than threshold 0,
    and shifting P by 2^8 errs less still (the small P leave the subnormals)."""
    from cubinforge.bench.fp8_p_emulate import emulate, rmse
    from cubinforge.bench.fp8_reference import attention

    q, k, v = _inputs(outliers=True)
    ref = attention(q, k, v)
    err = {tk: rmse(emulate(q, k, v, 192, *tk), ref) for tk in ((8.0, 0.0), (0.0, 0.0), (4.0, 4.0), (0.0, 8.0))}
    assert err[(8.0, 0.0)] > 1.2 * err[(0.0, 0.0)] > 1.2 * err[(0.0, 8.0)], err
    assert err[(8.0, 0.0)] > err[(4.0, 4.0)], err
