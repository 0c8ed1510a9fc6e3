"""diag_trim (issue 10, short causal): in a causal tile's first key block each consumer
warpgroup runs QK^T, its softmax and the PV GEMM over only the keys its 64 rows see. The
block_range rule it rests on (against brute force), the config's rules, and the A/B set."""

from __future__ import annotations

import itertools

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90 import block_range

BF16 = dict(arch="sm_90a", dtype="bf16")


def _visible_brute(m_block, wg, n_block, sq, sk, tile_m, tile_n):
    """Leading keys of block n_block some row of warpgroup wg sees (bottom-right causal), by
    listing every (row, key) pair; the rows past seqlen_q count too (the kernel computes them)."""
    best = 0
    for row in range(m_block * tile_m + 64 * wg, m_block * tile_m + 64 * (wg + 1)):
        for c in range(tile_n):
            key = n_block * tile_n + c
            if key < sk and key <= row + sk - sq:
                best = max(best, c + 1)
    return best


@pytest.mark.parametrize("tile_m,tile_n", [(128, 128), (128, 80), (128, 96), (192, 128)])
def test_wg_visible_keys_matches_brute_force(tile_m, tile_n):
    for sq, sk in [(1, 1), (63, 63), (65, 65), (200, 200), (333, 333), (129, 700), (700, 129), (700, 651)]:
        num_m = (sq + tile_m - 1) // tile_m
        for m_block, wg in itertools.product(range(num_m), range(tile_m // 64)):
            n_max = block_range.n_block_max(m_block, sq, sk, tile_m, tile_n, True)
            for n_block in range(n_max):
                got = block_range.wg_visible_keys(m_block, wg, n_block, sq, sk, tile_m, tile_n)
                assert got == _visible_brute(m_block, wg, n_block, sq, sk, tile_m, tile_n), \
                    (sq, sk, m_block, wg, n_block)


def test_equal_lengths_at_128x128_trim_warpgroup_0_to_half_of_each_diagonal_block():
    """The case the switch is for: warpgroup 0 sees exactly 64 keys of its tile's first block."""
    for m_block in range(8):
        first = block_range.n_block_max(m_block, 1024, 1024, 128, 128, True) - 1
        assert block_range.wg_visible_keys(m_block, 0, first, 1024, 1024, 128, 128) == 64
        assert block_range.wg_visible_keys(m_block, 1, first, 1024, 1024, 128, 128) == 128


@pytest.mark.parametrize("bad,what", [
    (dict(causal=False, scheduler="persistent"), "causal"),
    (dict(dtype="e4m3", tile_n=128, separate_o_smem=True), "e4m3"),
    (dict(intra_wg_overlap=False), "intra_wg_overlap"),
    (dict(split_kv=True, scheduler="single"), "inference"),
    (dict(head_dim=256), "tile_n"),  # 128 x 80: 40 keys are not whole K slices
])
def test_diag_trim_refuses_what_it_is_not_built_for(bad, what):
    over = {**BF16, "head_dim": 128, "causal": True, "scheduler": "lpt", "diag_trim": True, **bad}
    with pytest.raises(ValueError, match="diag_trim") as e:
        FwdConfig(**over)
    assert what.split("_")[0] in str(e.value)


def test_diag_trim_is_off_unless_asked():
    assert FwdConfig(**BF16, head_dim=128, causal=True, scheduler="lpt").diag_trim is False
    assert FwdConfig(**BF16, head_dim=128, causal=True, scheduler="lpt", diag_trim=True).diag_trim is True


def test_diag_trim_set_is_each_shipped_causal_form_and_its_trim():
    from bench.ab import DIAG_TRIM, experiment_config

    labels = [label for label, _ in DIAG_TRIM]
    assert len(labels) == len(set(labels))
    bases = [label for label in labels if not label.endswith("+diag-trim")]
    assert [label for label in labels if label.endswith("+diag-trim")] == [f"{b}+diag-trim" for b in bases]
    for label, over in DIAG_TRIM:
        cfg = experiment_config(over)
        assert cfg.causal and cfg.diag_trim == label.endswith("+diag-trim")
        # Each base is the form that ships: the config with no overrides but its key's own.
        if not cfg.diag_trim:
            shipped = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=cfg.head_dim, causal=True,
                                scheduler=cfg.scheduler, tile_m=cfg.tile_m, tile_n=cfg.tile_n,
                                head_dim_v=cfg.head_dim_v)
            assert shipped == cfg, label
