"""mask.apply_mask_bits keeps the columns apply_mask keeps: its counting rule, checked
against the per-element compare for every limit that can occur."""

from __future__ import annotations

import pytest


@pytest.fixture
def keep_count_rule():
    # mask.py imports the CuTe DSL; the GPU machine has none, and `make device-test` collects
    # this file there: import it here, not at module level, so collection never needs cutlass.
    pytest.importorskip("cutlass")
    from cubinforge.generator.kernels.fa3_fwd_sm90.mask import keep_count_rule
    return keep_count_rule


def wgmma_offsets(ncols):
    return [8 * (c // 2) + c % 2 for c in range(ncols)]


@pytest.mark.parametrize("tile_n", [64, 80, 96, 128])
def test_keep_count_matches_per_column_compare(keep_count_rule, tile_n):
    ncols = tile_n // 4  # a quad's four threads share a row's columns
    offsets = wgmma_offsets(ncols)
    rule = keep_count_rule(offsets)
    assert rule is not None
    for first_col in (0, 2, 4, 6):  # a thread's first column: 2 * (lane % 4)
        for limit in range(-2 * tile_n, 3 * tile_n):
            n = rule(limit - first_col, min, max)
            kept = [first_col + off < limit for off in offsets]
            # the kept columns are a prefix, and n counts them ...
            assert kept == [c < n for c in range(ncols)], (first_col, limit)
            # ... so bit c of the row's mask says whether column c stays
            bits = 0xFFFFFFFF if n >= 32 else (1 << min(n, 31)) - 1
            assert [bool((bits >> c) & 1) for c in range(ncols)] == kept


def test_other_fragment_shapes_get_no_rule(keep_count_rule):
    assert keep_count_rule([0, 1, 2, 3]) is None
    assert keep_count_rule(wgmma_offsets(34)) is None  # more columns than bits


@pytest.mark.parametrize("tile_n", [64, 128])
def test_window_bits_match_per_column_compare(keep_count_rule, tile_n):
    """apply_window_mask_bits: the kept run [n_lo, n_hi) of window_keep_range, as the
    difference of two prefix masks, is exactly the columns with col_start <= col < col_limit."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.mask import window_keep_range

    ncols = tile_n // 4
    offsets = wgmma_offsets(ncols)
    rule = keep_count_rule(offsets)

    def prefix(n):
        return 0xFFFFFFFF if n >= 32 else (1 << min(n, 31)) - 1

    span = range(-tile_n - 3, 2 * tile_n + 3)
    for first_col in (0, 6):
        for start in span:
            for limit in span[::3]:
                n_lo, n_hi = window_keep_range(rule, start, limit, first_col)
                bits = prefix(n_hi) & (prefix(n_lo) ^ 0xFFFFFFFF)
                kept = [start <= first_col + off < limit for off in offsets]
                assert [bool((bits >> c) & 1) for c in range(ncols)] == kept, (first_col, start, limit)


@pytest.mark.parametrize("tile_n", [144, 160, 176, 192, 256])
def test_wide_rows_keep_columns_chunk_by_chunk(keep_count_rule, tile_n):
    """apply_wide_mask_bits (tile_n > 128): one count and one 32-bit mask per chunk of 32
    columns keeps exactly the columns the per-element compare keeps."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.mask import MASK_BITS, keep_count_chunks

    ncols = tile_n // 4
    offsets = wgmma_offsets(ncols)
    chunks = keep_count_chunks(offsets)
    assert chunks is not None and [lo for lo, _, _ in chunks] == list(range(0, ncols, MASK_BITS))
    for first_col in (0, 2, 4, 6):
        for limit in range(-2 * tile_n, 3 * tile_n):
            kept = [first_col + off < limit for off in offsets]
            got = [False] * ncols
            for lo, base, rule in chunks:
                n = rule(limit - first_col - base, min, max)
                bits = 0xFFFFFFFF if n >= 32 else (1 << min(n, 31)) - 1
                for j in range(min(MASK_BITS, ncols - lo)):
                    got[lo + j] = bool((bits >> j) & 1)
            assert got == kept, (first_col, limit)


def test_chunks_of_narrow_rows_are_the_rule_itself(keep_count_rule):
    from cubinforge.generator.kernels.fa3_fwd_sm90.mask import keep_count_chunks

    assert [(lo, base) for lo, base, _ in keep_count_chunks(wgmma_offsets(32))] == [(0, 0)]
    assert keep_count_chunks([0, 1, 2, 3]) is None
    assert keep_count_chunks(wgmma_offsets(32) + [128, 130]) is None  # a chunk of another shape
