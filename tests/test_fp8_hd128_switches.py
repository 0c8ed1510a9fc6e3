"""The e4m3 hd128 loop's switch of bench.ab's fp8-hd128-2 set: FA3's one-shuffle P exchange
(fp8_p_pair_shuffle) modelled on the CPU against the A operand's columns, its bounds, and the
set's rows against the shipped bases. The kernels themselves are checked on the GPU by
bench.fp8 --ab-home (bench.ab's e4m3 gate)."""

from __future__ import annotations

import pytest

E4M3_HD128 = dict(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, scheduler="persistent",
                  v_layout="colmajor", tile_m=128, tile_n=192)


def _quad_words(m: int):
    """Lane t's words x (column group j = 2m) and y (j = 2m + 1) in the accumulator's order:
    bytes (row, column) = (r0, 8j + 2t), (r0, 8j + 2t + 1), (r1, 8j + 2t), (r1, 8j + 2t + 1)."""
    def word(t, j):
        return [(r, 8 * j + 2 * t + p) for r in (0, 1) for p in (0, 1)]
    return [word(t, 2 * m) for t in range(4)], [word(t, 2 * m + 1) for t in range(4)]


@pytest.mark.parametrize("m", [0, 1, 5])
def test_pair_exchange_gives_each_lane_its_a_columns(m):
    """After the exchange lane t holds row r0's columns 16m + 4t..4t+3 in its first word and
    row r1's in its second: the 8-bit A operand's layout (fp8_p.check_layouts)."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.fp8_p import pair_exchange_model

    x, y = _quad_words(m)
    for t, (w0, w1) in enumerate(pair_exchange_model(x, y)):
        assert w0 == [(0, 16 * m + 4 * t + e) for e in range(4)], (t, w0)
        assert w1 == [(1, 16 * m + 4 * t + e) for e in range(4)], (t, w1)


def test_pair_exchange_model_would_catch_a_wrong_source():
    """The model's check is not vacuous: a lane reading the wrong partner gets another lane's bytes."""
    from cubinforge.generator.kernels.fa3_fwd_sm90 import fp8_p

    x, y = _quad_words(0)
    saved = fp8_p.PAIR_SRC
    try:
        fp8_p.PAIR_SRC = (0, 1, 2, 3)
        got = fp8_p.pair_exchange_model(x, y)
    finally:
        fp8_p.PAIR_SRC = saved
    assert any(w0 != [(0, 4 * t + e) for e in range(4)] for t, (w0, _) in enumerate(got))


def test_switch_bounds():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    base = FwdConfig(**dict(E4M3_HD128, v_layout="rowmajor", tile_n=224))
    assert not base.fp8_p_pair_shuffle  # the row-major form keeps its local P
    with pytest.raises(ValueError, match="fp8_p_pair_shuffle"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, fp8_p_pair_shuffle=True)
    with pytest.raises(ValueError, match="fp8_p_pair_shuffle"):  # row-major V's local P needs no exchange
        FwdConfig(**dict(E4M3_HD128, v_layout="rowmajor", tile_n=224), fp8_p_pair_shuffle=True)
    FwdConfig(**dict(E4M3_HD128, v_layout="rowmajor", tile_n=224), fp8_local_p=False, fp8_p_pair_shuffle=True)


def test_fp8_hd128_2_set_starts_from_the_shipped_configs():
    """The set's bases are the FwdConfigs the shipped sets built when it was timed (TUNED_FP8's
    colmajor 128 x 192, SET=fp8's row-major 128 x 224, the default set's causal lpt), and every
    other row is its base with what its label names."""
    from cubinforge.bench.ab import EXPERIMENTS, FP8_HD128_2_BASES, experiment_config
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    rows = dict(EXPERIMENTS["fp8-hd128-2"])
    assert set(FP8_HD128_2_BASES) <= set(rows)
    shipped = {
        # TUNED_FP8 gained the pair shuffle from the run that timed this set.
        "tile-128x192+in-order-sum+lazy-rescale-8": FwdConfig(**E4M3_HD128, fp8_p_pair_shuffle=False),
        "v-rowmajor+tile-128x224": FwdConfig(**dict(E4M3_HD128, v_layout="rowmajor", tile_n=224)),
        "lpt": FwdConfig(**dict(E4M3_HD128, causal=True, scheduler="lpt", tile_n=0, tile_m=0)),
    }
    for label, want in shipped.items():
        assert experiment_config(rows[label]) == want, label
    for label, over in rows.items():
        assert experiment_config(over).fp8_p_pair_shuffle == ("pair-shuffle" in label), label
    assert experiment_config(rows["tile-128x192+in-order-sum+lazy-rescale-8+pair-shuffle"]) == FwdConfig(**E4M3_HD128)


def test_pair_shuffle_is_on_only_where_it_was_timed():
    """TUNED_FP8 turns fp8_p_pair_shuffle on for the column-major 128 x 192 non-causal form the
    H200 timed (check8/l7/); other e4m3 forms, whose P also takes the shuffled exchange, keep it off."""
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    assert FwdConfig(**E4M3_HD128).fp8_p_pair_shuffle
    for other in (dict(E4M3_HD128, tile_m=0, tile_n=0), dict(E4M3_HD128, causal=True, scheduler="lpt", tile_m=0,
                                                             tile_n=0), dict(E4M3_HD128, head_dim=256, tile_n=128),
                  dict(E4M3_HD128, head_dim=64, tile_m=0, tile_n=0)):
        assert not FwdConfig(**other).fp8_p_pair_shuffle, other
