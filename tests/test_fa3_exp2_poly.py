"""The softmax-on-FMA candidates on the CPU: exp2_poly's model of the kernel's exp2 arithmetic,
a numpy model of the conditional rescaling, and their FwdConfig switches (no DSL needed);
one slow test cross-compiles a candidate and counts its exp2s in the SASS."""

from __future__ import annotations

import numpy as np
import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90.exp2_poly import (
    COEFFS,
    emulated_column,
    exp2_fma_model,
    fit_minimax,
)

# The measured max relative error of the fp32 evaluation (exp2_poly's docstring), with margin:
# under e4m3's 2^-4 rounding of P at degree 2 and bf16's 2^-9 at degree 3.
BOUND = {2: 2.2e-3, 3: 9.0e-5}


@pytest.mark.parametrize("degree", sorted(COEFFS))
def test_polynomial_error_over_the_softmax_range(degree):
    # x = s * scale - max: <= 0, or up to the rescale threshold (8) with a stale max.
    x = np.concatenate([np.linspace(-126.0, 9.0, 1_000_001, dtype=np.float32),
                        np.float32(-1.0) * np.logspace(-12, 0, 10_001, dtype=np.float32)])
    got = exp2_fma_model(x, degree).astype(np.float64)
    ref = np.exp2(x.astype(np.float64))
    rel = np.abs(got - ref) / ref
    assert rel.max() <= BOUND[degree], rel.max()
    # The bound is near the minimax level, not loose: degree 3 is ~25x better than 2.
    assert rel.max() >= 0.5 * BOUND[degree]


@pytest.mark.parametrize("degree", sorted(COEFFS))
def test_edges_masked_scores_integers_and_no_sign_borrow(degree):
    x = np.array([-np.inf, -1e30, -200.0, -127.0, -126.75, -3.0, -0.0, 0.0, 1.0, 8.0], dtype=np.float32)
    y = exp2_fma_model(x, degree)
    assert np.all(np.isfinite(y)) and np.all(y >= 0)  # p >= 1: j << 23 never reaches the sign bit
    assert np.all(y[:4] == 0.0)  # -inf (a masked score) and anything at or below -127 give 0
    assert y[4] < 2.0**-126  # below fp32's normal range: a denormal, flushed by the FTZ math after
    assert list(y[5:]) == [0.125, 1.0, 1.0, 2.0, 256.0]  # p(0) = 1 exactly: integers are exact


@pytest.mark.parametrize("degree", sorted(COEFFS))
def test_coefficients_are_the_minimax_fit(degree):
    assert np.allclose(fit_minimax(degree), COEFFS[degree], rtol=0, atol=2e-6)


@pytest.mark.parametrize("eighths", range(9))
@pytest.mark.parametrize("cols", [16, 32, 48, 56])  # a thread's row: tile_n / 4 (hd64/128, 192, 224)
def test_emulated_columns_are_the_fraction_spread_out(eighths, cols):
    picked = [c for c in range(cols) if emulated_column(c, eighths)]
    assert len(picked) == cols * eighths // 8
    # Each run of 8 columns holds exactly `eighths` of them (no long MUFU-only or FMA-only run).
    assert all(sum(emulated_column(c, eighths) for c in range(b, b + 8)) == eighths for b in range(0, cols, 8))


def lazy_online_softmax(s, block, threshold, warp_rows=16, exp2=np.exp2):
    """The kernel's step order on fp32 scores (log2 units) of rows x keys, blocks visited last
    to first: a warp's rows (16 here, the 8 x 2 rows of one warp) move their maxima only when
    one of them grew past `threshold`. Returns (O weights normalised, LSE in log2, max P)."""
    rows, keys = s.shape
    m = np.full(rows, -np.inf, np.float32)
    total = np.zeros(rows, np.float32)
    acc = np.zeros((rows, keys), np.float32)  # O as weights on the keys (V = identity)
    p_max = 0.0
    for n0 in reversed(range(0, keys, block)):
        blk = s[:, n0:n0 + block]
        cand = np.maximum(m, blk.max(1))
        with np.errstate(invalid="ignore"):
            grow = (cand - m) > threshold
        first = n0 + block >= keys
        for w in range(0, rows, warp_rows):
            sl = slice(w, w + warp_rows)
            if first or threshold == 0 or grow[sl].any():
                safe = np.where(np.isneginf(cand[sl]), 0.0, cand[sl]).astype(np.float32)
                scale = exp2(m[sl] - safe) if not first else np.ones_like(safe)
                total[sl] *= scale
                acc[sl] *= scale[:, None]
                m[sl] = cand[sl]
        safe = np.where(np.isneginf(m), 0.0, m).astype(np.float32)
        p = exp2(blk - safe[:, None])
        p_max = max(p_max, float(p.max()))
        total += p.sum(1)
        acc[:, n0:n0 + block] += p
    return acc / total[:, None], safe + np.log2(total), p_max


@pytest.mark.parametrize("degree", [None, 3])
def test_conditional_rescaling_is_exact_and_bounds_p(degree):
    """Scores that rise block by block (every block moves some rows' maxima by up to ~20 log2
    units) and flat noise: the lazy result equals the eager one to fp32 rounding, and P stays
    below 2^threshold."""
    rng = np.random.default_rng(0)
    rows, keys, block = 64, 1024, 128
    ramp = np.minimum((keys - 1 - np.arange(keys)) * 0.08, 40.0)  # rises as blocks go left
    s = (rng.standard_normal((rows, keys)) * 2 + ramp * rng.uniform(0, 1.5, (rows, 1))).astype(np.float32)
    s[:5, 900:] = -np.inf  # rows that see no key in the first blocks visited
    exp2 = np.exp2 if degree is None else (lambda x: exp2_fma_model(x, degree))
    w_lazy, lse_lazy, p_max = lazy_online_softmax(s, block, 8.0, exp2=exp2)
    w_eager, lse_eager, p_eager = lazy_online_softmax(s, block, 0.0, exp2=exp2)
    ref = np.exp2(s.astype(np.float64) - s.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert np.abs(w_lazy - ref).max() < (1e-5 if degree is None else 1e-3)
    # The polynomial's error moves with the fraction of x, which the stale max shifts.
    tol = 1e-5 if degree is None else 2 * BOUND[degree]
    assert np.abs(w_lazy - w_eager).max() < tol
    assert np.abs(lse_lazy - lse_eager).max() < tol
    assert p_eager <= 1.0 and 1.0 < p_max <= 2.0**8


def test_softmax_switches_are_checked():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    base = dict(arch="sm_90a", dtype="bf16", head_dim=64, causal=False)
    assert FwdConfig(**base, exp2_emu_eighths=3, rescale_threshold=8.0).exp2_emu_degree == 3
    with pytest.raises(ValueError, match="0..8"):
        FwdConfig(**base, exp2_emu_eighths=9)
    with pytest.raises(ValueError, match="exp2_emu_degree"):
        FwdConfig(**base, exp2_emu_degree=5)
    with pytest.raises(ValueError, match="must fit e4m3"):
        FwdConfig(**{**base, "dtype": "e4m3", "head_dim": 128}, rescale_threshold=9.0)
    with pytest.raises(ValueError, match="dense forward only"):
        FwdConfig(**{**base, "head_dim": 128}, varlen=True, exp2_emu_eighths=2)


def test_mufu_sets_start_from_the_shipped_configs():
    """Each base row of bench.ab's mufu sets is the FwdConfig the shipped set built when the set
    was timed (session 5's promotions, made from that run, switched back off), and every
    candidate differs from its base only in the softmax switches its label names."""
    from dataclasses import replace

    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    def cfg(**kw):
        c = FwdConfig(arch="sm_90a", **kw)
        # What config.TUNED / TUNED_FP8 gained from the run that timed these rows and after it.
        return replace(c, q_double_buffer=False, deferred_o_store=False, rescale_threshold=0.0,
                       fp8_p_pair_shuffle=False, stages=FwdConfig(arch="sm_90a", stages=0, **kw).stages,
                       causal_order="all")
    shipped = {
        "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor+tile-128x192+in-order-sum":
            cfg(dtype="e4m3", head_dim=128, causal=False, scheduler="persistent", v_layout="colmajor",
                tile_m=128, tile_n=192),
        "fa3-fwd-sm_90a-e4m3-hd128-noncausal+v-rowmajor+tile-128x224":
            cfg(dtype="e4m3", head_dim=128, causal=False, scheduler="persistent", tile_m=128, tile_n=224),
        "fa3-fwd-sm_90a-e4m3-hd128-causal-colmajor+default":
            cfg(dtype="e4m3", head_dim=128, causal=True, scheduler="lpt", v_layout="colmajor"),
        "fa3-fwd-sm_90a-bf16-hd64-noncausal+persistent+separate-o+wg-epilogue":
            cfg(dtype="bf16", head_dim=64, causal=False, scheduler="persistent"),
        "fa3-fwd-sm_90a-bf16-hd64-causal+persistent-lpt+separate-o+wg-epilogue":
            cfg(dtype="bf16", head_dim=64, causal=True, scheduler="persistent"),
        "fa3-fwd-sm_90a-bf16-hd64-causal+persistent-lpt+tile-128x128+separate-o+wg-epilogue+mask-bits":
            cfg(dtype="bf16", head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128),
        "fa3-fwd-sm_90a-bf16-hd128-noncausal+persistent+in-order-sum+separate-o":
            cfg(dtype="bf16", head_dim=128, causal=False, scheduler="persistent"),
    }
    rows = {ab_name(experiment_config(o), label): (label, experiment_config(o))
            for label, o in EXPERIMENTS["mufu"]}
    assert EXPERIMENTS["mufu"] == EXPERIMENTS["mufu-fp8"] + EXPERIMENTS["mufu-bf16"]
    assert set(shipped) <= set(rows)
    for name, want in shipped.items():
        assert rows[name][1] == want, name
    for name, (label, c) in rows.items():
        base = next(b for b in shipped if name.startswith(b + "+") or name == b)
        plain = replace(c, exp2_emu_eighths=0, exp2_emu_degree=3, rescale_threshold=0.0)
        assert plain == shipped[base], name
        assert (c.exp2_emu_eighths > 0) == ("+emu-" in name[len(base):])
        assert (c.rescale_threshold == 8.0) == ("lazy-rescale-8" in label)
        assert (c.exp2_emu_degree == 2) == ("deg2" in label)


@pytest.mark.slow
def test_an_emulated_candidate_moves_exp2_off_the_mufu():
    """The SASS of e4m3 hd128 128 x 192 with 3 of 8 columns emulated and the lazy rescale: per
    key block a thread's 2 x 48 scores take 60 MUFU.EX2 (+2 for the rescale factors, behind
    the vote) and 36 LEAs (one per emulated exp2), with no spills."""
    pytest.importorskip("cutlass")
    from cubinforge.bench import mufu_sass as mod
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig, compile_variant
    from cubinforge.generator.sass import cuobjdump, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip nvidia-cuda-cuobjdump)")
    cfg = FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, scheduler="persistent",
                    v_layout="colmajor", tile_m=128, tile_n=192, exp2_emu_eighths=3, rescale_threshold=8.0,
                    fp8_p_pair_shuffle=False)  # the P exchange as timed (TUNED_FP8 gained the pair shuffle later)
    sass = cuobjdump(["-sass"], compile_variant(cfg).cubin)
    win = max(mod.block_windows(sass), key=lambda c: c["total"])
    assert win["MUFU.EX2"] == 62, win
    assert 36 <= win["LEA"] <= 40 and win["VOTE"] >= 1, win
    assert "STL" not in sass and "LDL" not in sass
