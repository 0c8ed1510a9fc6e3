"""block_range: the key blocks a query tile visits and which of them need a mask, checked
exhaustively over small problems against a brute-force visibility matrix. The kernel calls
the same functions (with cutlass.min/max), so these are the ranges the cubin walks."""

from __future__ import annotations

import itertools

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import block_range as br
from cubinforge.generator.kernels.fa3_fwd_sm90.contract import window_expr
from cubinforge.runtime.contract import evaluate

WINDOWS = [-1, 0, 1, 2, 3, 5, 8, 13, 40]


def visible(i, j, sq, sk, causal, local, left, right):
    """FlashAttention's rule, written out: bottom-right aligned, -1 unbounded."""
    if not 0 <= j < sk:
        return False
    off = sk - sq
    if causal and j > i + off:
        return False
    if local:
        if left >= 0 and j < i + off - left:
            return False
        if right >= 0 and j > i + off + right:
            return False
    return True


def check_tile(m, sq, sk, tm, tn, causal, local, wl, wr):
    left, right = br.window_bounds(wl, wr, sq, sk)
    lo, hi = br.n_block_range(m, sq, sk, tm, tn, causal, local, left, right)
    num_n = -(-sk // tn)
    rows = range(m * tm, (m + 1) * tm)       # the tile's rows, those past seqlen_q included
    vis = {(i, j) for i in rows for j in range(sk) if visible(i, j, sq, sk, causal, local, wl, wr)}
    where = (m, sq, sk, tm, tn, causal, local, wl, wr, lo, hi)
    assert 0 <= lo < hi <= num_n, where
    blocks = {j // tn for _, j in vis}
    if not blocks:
        assert (lo, hi) == (0, 1), where        # one fully masked block: O = 0, LSE = -inf
        return
    # Every visible key is loaded, and every loaded block holds a visible key.
    assert set(range(lo, hi)) == set(range(min(blocks), max(blocks) + 1)) == blocks, where
    # Blocks left unmasked must be visible in full for every row of the tile.
    def full(n):
        return all((i, j) in vis for i in rows for j in range(n * tn, (n + 1) * tn))
    if local:
        first, middle, last = br.local_block_counts(
            lo, hi, br.n_block_right_masked(m, sq, sk, tm, tn, True, right),
            br.n_block_left_masked(m, sq, sk, tm, tn, left))
        assert min(first, middle, last) >= 0 and first + middle + last == hi - 1 - lo, where
        unmasked = range(hi - 2 - first - middle + 1, hi - 1 - first)
        assert len(unmasked) == middle
    elif causal:
        # kernel.consume: blocks below n_block_right_masked run unmasked (the first one is masked).
        nc = br.n_block_right_masked(m, sq, sk, tm, tn)
        n_masked = max(min(hi - 1 - nc, hi - 1), 0)
        unmasked = range(0, hi - 1 - n_masked)
    else:
        unmasked = range(0, hi - 1)
    for n in unmasked:
        assert full(n), (where, n)


@pytest.mark.parametrize("tm,tn", [(4, 4), (4, 6), (8, 3)])
def test_local_ranges_exhaustive(tm, tn):
    for sq, sk in itertools.product(range(1, 19), range(1, 19)):
        for wl, wr in itertools.product(WINDOWS, WINDOWS):
            if wl < 0 and wr < 0:
                continue
            for m in range(-(-sq // tm)):
                check_tile(m, sq, sk, tm, tn, False, True, wl, wr)


@pytest.mark.parametrize("tm,tn", [(4, 4), (4, 6), (8, 3), (6, 4)])
def test_causal_and_full_ranges_exhaustive(tm, tn):
    for sq, sk in itertools.product(range(1, 25), range(1, 25)):
        for m in range(-(-sq // tm)):
            check_tile(m, sq, sk, tm, tn, True, False, -1, -1)
            check_tile(m, sq, sk, tm, tn, False, False, -1, -1)


def test_kernel_tile_sizes_spot_checks():
    # Real tiles and the windows the GPU tests use, with seqlen_q != seqlen_k.
    for sq, sk in ((300, 517), (517, 300), (257, 257), (1000, 130)):
        for wl, wr in ((0, 0), (1, 1), (63, 0), (64, 64), (127, 3), (4096, 0), (128, 128), (-1, 5), (7, -1)):
            for m in range(-(-sq // 128)):
                check_tile(m, sq, sk, 128, 128, False, True, wl, wr)
                check_tile(m, sq, sk, 128, 80, False, True, wl, wr)


def test_window_bounds_and_the_contract_agree():
    for sq, sk in ((1, 1), (5, 9), (9, 5), (4096, 100)):
        for w in (-7, -1, 0, 1, 4, 5, 8, 9, 10, 1 << 40):
            want = br.window_bounds(w, w, sq, sk)
            env = {"window_left": w, "window_right": w, "seqlen_q": sq, "seqlen_k": sk}
            got = (evaluate(window_expr("window_left", "seqlen_k"), env.__getitem__),
                   evaluate(window_expr("window_right", "seqlen_q"), env.__getitem__))
            assert got == want, (sq, sk, w)
            assert 0 <= want[0] <= sk and 0 <= want[1] <= sq


def test_resolved_window_sees_what_the_raw_one_sees():
    # Clamping to (seqlen_k, seqlen_q) changes no visibility.
    for sq, sk in ((3, 7), (7, 3), (6, 6)):
        for wl, wr in itertools.product([-1, 0, 2, 6, 7, 8, 30], repeat=2):
            left, right = br.window_bounds(wl, wr, sq, sk)
            for i, j in itertools.product(range(sq), range(sk)):
                assert visible(i, j, sq, sk, False, True, wl, wr) == visible(i, j, sq, sk, False, True, left, right)


def test_window_mask_columns():
    """mask.window_cols: the columns a row keeps in a block, against the rule."""
    mask = pytest.importorskip("cubinforge.generator.kernels.fa3_fwd_sm90.mask")

    class Coords:  # the (row, col) a fragment element sits at; only rows matter here
        def __init__(self, rows):
            self.rows = rows

        def __getitem__(self, rc):
            return (self.rows[rc[0]], 0)

    tm, tn = 8, 6
    for sq, sk in ((8, 20), (16, 9), (5, 5)):
        for wl, wr in itertools.product([0, 1, 3, 7, -1], repeat=2):
            left, right = br.window_bounds(wl, wr, sq, sk)
            for m in range(-(-sq // tm)):
                for n in range(-(-sk // tn)):
                    coords = Coords(list(range(tm)))
                    for r in range(min(tm, sq - m * tm)):   # rows past seqlen_q are never stored
                        start, limit = mask.window_cols(coords, r, m, n, sq, sk, tm, tn, left, right)
                        kept = [start <= c < limit for c in range(tn)]
                        want = [visible(m * tm + r, n * tn + c, sq, sk, False, True, wl, wr) for c in range(tn)]
                        assert kept == want, (sq, sk, wl, wr, m, n, r)
