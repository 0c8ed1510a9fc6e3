"""Key-length, causal and sliding-window masking of an S fragment.

Causal is aligned bottom-right as in FlashAttention: query row i sees key j when
j <= i + seqlen_k - seqlen_q. A window (left, right) keeps i + off - left <= j <= i + off + right
(block_range.py); it is applied per element, so windows narrower than a tile are exact.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from .layouts import acc_as_rows_cols


def row_col_limit(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k, tile_m, tile_n, causal):
    """First column of key block n_block that row r of the fragment must not see: past the
    key length, or (causal) past the row's diagonal."""
    col_limit = seqlen_k - n_block * tile_n
    if cutlass.const_expr(causal):
        row = m_block * tile_m + coords_rc[r, 0][0]
        col_limit = cutlass.min(col_limit, row + seqlen_k - seqlen_q + 1 - n_block * tile_n)
    return col_limit


def window_cols(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k, tile_m, tile_n, left, right, group=None):
    """(first kept column, first column past the kept ones) of row r in key block n_block
    under a window; the key length bounds the second. `group` (pack-GQA): a row is (token,
    head), group heads per token, and the window is the token's (block_range.py)."""
    row = m_block * tile_m + coords_rc[r, 0][0]
    if group is not None:
        row = row // group
    diag = row + seqlen_k - seqlen_q - n_block * tile_n
    col_limit = cutlass.min(seqlen_k - n_block * tile_n, diag + right + 1)
    return diag - left, col_limit


@cute.jit
def apply_window_mask(
    acc_S: cute.Tensor,
    coords_rc: cute.Tensor,
    m_block: Int32,
    n_block: Int32,
    seqlen_q: Int32,
    seqlen_k: Int32,
    left: Int32,
    right: Int32,
    tile_m: cutlass.Constexpr[int],
    tile_n: cutlass.Constexpr[int],
    group: Int32 | None = None,
):
    """apply_mask for a sliding window: both edges and the key length (group: window_cols)."""
    s_rc = acc_as_rows_cols(acc_S)
    for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
        col_start, col_limit = window_cols(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k,
                                           tile_m, tile_n, left, right, group)
        for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
            col = coords_rc[0, c][1]
            s_rc[r, c] = -Float32.inf if col >= col_limit or col < col_start else s_rc[r, c]


@cute.jit
def apply_mask(
    acc_S: cute.Tensor,
    coords_rc: cute.Tensor,  # (row, col) of each element within the tile, rows x cols view
    m_block: Int32,
    n_block: Int32,
    seqlen_q: Int32,
    seqlen_k: Int32,
    tile_m: cutlass.Constexpr[int],
    tile_n: cutlass.Constexpr[int],
    causal: cutlass.Constexpr[bool],
):
    s_rc = acc_as_rows_cols(acc_S)
    for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
        col_limit = row_col_limit(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k, tile_m, tile_n, causal)
        for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
            # A select, not an `if`: a branch that writes one register of the fragment
            # becomes a select over the whole fragment, quadratic in its size.
            s_rc[r, c] = -Float32.inf if coords_rc[0, c][1] >= col_limit else s_rc[r, c]


def column_offsets(coords_rc) -> list[int]:
    """A thread's column offsets within its S fragment, relative to its first column, read
    from the fragment's coordinates at trace time (the same for every thread)."""
    n = cute.size(coords_rc, mode=[1])
    first = coords_rc[0, 0][1]
    return [coords_rc[0, c][1] - first for c in range(n)]


def keep_count_rule(offsets: list[int]):
    """For offsets 8*(c//2) + c%2 (the SM90 WGMMA accumulator: column pairs every 8), the
    number of leading columns with offset < L is ceil(L/8) + ceil((L-1)/8), each clamped to
    [0, pairs]. Returns that rule, or None for a fragment of another shape."""
    expected = [8 * (c // 2) + c % 2 for c in range(len(offsets))]
    if offsets != expected or len(offsets) > 32 or len(offsets) % 2:
        return None
    pairs = len(offsets) // 2

    def keep_count(limit, mn, mx):
        # Numerators clamped at 0 first: floor and truncating division then agree.
        even = mn(mx(limit + 7, 0) // 8, pairs)
        odd = mn(mx(limit + 6, 0) // 8, pairs)
        return even + odd

    return keep_count


@cute.jit
def prefix_bits(n: Int32) -> Int32:
    """Bits 0..n-1 set. A shift by 32 is undefined for 32-bit values: n >= 32 takes all bits."""
    return Int32(-1) if n >= 32 else (Int32(1) << cutlass.min(n, 31)) - 1


@cute.jit
def apply_row_bits(s_rc: cute.Tensor, r: cutlass.Constexpr[int], bits: Int32):
    """Keep column c of row r where bit c of `bits` is set; -inf elsewhere."""
    for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
        s_rc[r, c] = s_rc[r, c] if ((bits >> c) & 1) != 0 else -Float32.inf


# Columns of one row's bit mask. A wider row (tile_n > 128: more than 32 columns a thread)
# takes one mask per 32 columns, each counted from its chunk's first offset.
MASK_BITS = 32


def keep_count_chunks(offsets: list[int]):
    """[(first column index, its offset, keep_count_rule of the chunk)] for each MASK_BITS
    columns of a row, or None where a chunk has no rule. A chunk starts at an even column,
    so the WGMMA accumulator's chunks have its offsets again, shifted by 128 keys each."""
    chunks = []
    for lo in range(0, len(offsets), MASK_BITS):
        part = offsets[lo:lo + MASK_BITS]
        rule = keep_count_rule([o - part[0] for o in part])
        if rule is None:
            return None
        chunks.append((lo, part[0], rule))
    return chunks or None


def thread_keep_count(offsets_rc):
    """The counting rule for this thread's column offsets, or an error naming them."""
    keep_count = keep_count_rule(column_offsets(offsets_rc))
    if keep_count is None:
        raise ValueError(f"mask_bits: no counting rule for column offsets {column_offsets(offsets_rc)}")
    return keep_count


def thread_keep_chunks(offsets_rc):
    """keep_count_chunks for this thread's column offsets, or an error naming them."""
    chunks = keep_count_chunks(column_offsets(offsets_rc))
    if chunks is None:
        raise ValueError(f"mask_bits: no counting rule for column offsets {column_offsets(offsets_rc)}")
    return chunks


@cute.jit
def apply_mask_bits(
    acc_S: cute.Tensor,
    coords_rc: cute.Tensor,
    offsets_rc: cute.Tensor,  # the same partition for a static thread: static coordinates
    m_block: Int32,
    n_block: Int32,
    seqlen_q: Int32,
    seqlen_k: Int32,
    tile_m: cutlass.Constexpr[int],
    tile_n: cutlass.Constexpr[int],
    causal: cutlass.Constexpr[bool],
):
    """apply_mask with one bit mask per row instead of a compare per element.

    A thread's columns are its first column plus fixed offsets, and the kept columns of a row
    are a prefix of them, so a row needs only its kept count n: bit c of (1 << n) - 1 says
    whether column c stays, which ptxas can move into predicates several bits at a time
    (R2P) rather than comparing each of the 32 columns. Same result as apply_mask
    (tests/test_fa3_mask.py checks the counting rule against the per-element compare).
    """
    s_rc = acc_as_rows_cols(acc_S)
    if cutlass.const_expr(cute.size(s_rc, mode=[1]) <= MASK_BITS):
        keep_count = thread_keep_count(offsets_rc)
        first_col = coords_rc[0, 0][1]
        for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
            col_limit = row_col_limit(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k, tile_m, tile_n, causal)
            apply_row_bits(s_rc, r, prefix_bits(keep_count(col_limit - first_col, cutlass.min, cutlass.max)))
    else:
        apply_wide_mask_bits(s_rc, coords_rc, offsets_rc, m_block, n_block, seqlen_q, seqlen_k, tile_m, tile_n,
                             causal)


@cute.jit
def apply_wide_mask_bits(
    s_rc: cute.Tensor,
    coords_rc: cute.Tensor,
    offsets_rc: cute.Tensor,
    m_block: Int32,
    n_block: Int32,
    seqlen_q: Int32,
    seqlen_k: Int32,
    tile_m: cutlass.Constexpr[int],
    tile_n: cutlass.Constexpr[int],
    causal: cutlass.Constexpr[bool],
):
    """apply_mask_bits for rows of more than MASK_BITS columns: one count and one mask per
    chunk (keep_count_chunks)."""
    chunks = thread_keep_chunks(offsets_rc)
    ncols = cute.size(s_rc, mode=[1])
    first_col = coords_rc[0, 0][1]
    for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
        col_limit = row_col_limit(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k, tile_m, tile_n, causal)
        for i in cutlass.range_constexpr(len(chunks)):
            lo, base, keep_count = chunks[i]
            hi = min(lo + MASK_BITS, ncols)
            bits = prefix_bits(keep_count(col_limit - first_col - base, cutlass.min, cutlass.max))
            for j in cutlass.range_constexpr(hi - lo):
                s_rc[r, lo + j] = s_rc[r, lo + j] if ((bits >> j) & 1) != 0 else -Float32.inf


def window_keep_range(keep_count, col_start, col_limit, first_col, mn=min, mx=max):
    """(n_lo, n_hi): under a window a thread's kept columns of a row are the run of indices
    n_lo <= c < n_hi (its offsets increase, so the columns before col_start are a prefix and
    so are those before col_limit). keep_count is keep_count_rule's."""
    return keep_count(col_start - first_col, mn, mx), keep_count(col_limit - first_col, mn, mx)


@cute.jit
def apply_window_mask_bits(
    acc_S: cute.Tensor,
    coords_rc: cute.Tensor,
    offsets_rc: cute.Tensor,  # thread 0's partition: static coordinates
    m_block: Int32,
    n_block: Int32,
    seqlen_q: Int32,
    seqlen_k: Int32,
    left: Int32,
    right: Int32,
    tile_m: cutlass.Constexpr[int],
    tile_n: cutlass.Constexpr[int],
):
    """apply_window_mask with one bit mask per row: the kept columns are the difference of
    two prefixes (window_keep_range), so a row costs two counts and a few integer ops
    instead of two compares per column; same result (tests/test_fa3_mask.py)."""
    s_rc = acc_as_rows_cols(acc_S)
    keep_count = thread_keep_count(offsets_rc)
    first_col = coords_rc[0, 0][1]
    for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
        col_start, col_limit = window_cols(coords_rc, r, m_block, n_block, seqlen_q, seqlen_k,
                                           tile_m, tile_n, left, right)
        n_lo, n_hi = window_keep_range(keep_count, col_start, col_limit, first_col, cutlass.min, cutlass.max)
        apply_row_bits(s_rc, r, prefix_bits(n_hi) & (prefix_bits(n_lo) ^ Int32(-1)))
