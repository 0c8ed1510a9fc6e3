"""Which key blocks a query tile visits, and which of them need a mask, as plain arithmetic.

The producer (what to load) and the consumers (what to multiply and mask) both call these,
inside the kernel with `cutlass.min/max` and in the CPU tests with Python's, so the range
the tests check exhaustively is the range the cubin walks.

Masks are aligned bottom-right, as FlashAttention's: with `off = seqlen_k - seqlen_q`, query
row i sees key j when

    causal:  j <= i + off
    local:   i + off - left <= j <= i + off + right

`left` and `right` reach the kernel already resolved (window_bounds): never negative, at
most seqlen_k and seqlen_q, so no sum below overflows 32 bits. Every numerator is clamped at
0 before a division (or the quotient is clamped at 0 after it), so floor and truncating
division agree.

Under pack-GQA (inference.py) a tile's rows are (token, head) pairs, `group` heads per token:
`group` (None elsewhere) maps the tile's first row and one past its last to tokens, and the
same rules then hold per token. With group None the traced arithmetic is the dense kernel's.
"""

from __future__ import annotations


def window_bounds(left: int, right: int, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    """FlashAttention's window_size (a negative side is unbounded) -> the (left, right) the
    kernel takes. left = seqlen_k and right = seqlen_q already reach every key, so larger
    values are cut down to those. The launch contract computes the same (contract.py)."""
    left = seqlen_k if left < 0 else min(left, seqlen_k)
    right = seqlen_q if right < 0 else min(right, seqlen_q)
    return left, right


def first_row(m_block, tile_m: int, group=None):
    """The tile's first query row (pack-GQA: its token)."""
    row = m_block * tile_m
    return row if group is None else row // group


def end_row(m_block, tile_m: int, group=None):
    """One past the tile's last query row (pack-GQA: one past its last row's token)."""
    if group is None:
        return (m_block + 1) * tile_m
    return ((m_block + 1) * tile_m - 1) // group + 1


def n_block_max(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, causal: bool,
                local: bool = False, right=0, mn=min, mx=max, group=None):
    """One past the last key block any row of query tile m_block sees (at least 1).

    A tile whose rows see no key still visits block 0, fully masked: O = 0, LSE = -inf."""
    n_max = (seqlen_k + tile_n - 1) // tile_n
    if causal or local:
        # One past the last key the tile's last row sees: (m_block+1)*tile_m - 1 + off (+ right).
        last_key = end_row(m_block, tile_m, group) + seqlen_k - seqlen_q
        if local:
            last_key = mx(last_key + right, 0)
        n_max = mx(mn(n_max, (last_key + tile_n - 1) // tile_n), 1)
    return n_max


def n_block_min(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, local: bool, left=0, mx=max,
                group=None):
    """The first key block any row of query tile m_block sees (0 unless local). Always below
    n_block_max: the first row's first key is before the last row's last one."""
    if not local:
        return 0
    first_key = mx(first_row(m_block, tile_m, group) + seqlen_k - seqlen_q - left, 0)
    return first_key // tile_n


def n_block_range(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, causal: bool,
                  local: bool = False, left=0, right=0, mn=min, mx=max, group=None):
    """(n_block_min, n_block_max): the tile visits key blocks n_block_min <= n < n_block_max."""
    lo = n_block_min(m_block, seqlen_q, seqlen_k, tile_m, tile_n, local, left, mx=mx, group=group)
    hi = n_block_max(m_block, seqlen_q, seqlen_k, tile_m, tile_n, causal, local, right, mn=mn, mx=mx, group=group)
    return lo, hi


def n_block_right_masked(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, local: bool = False,
                         right=0, mx=max, group=None):
    """Blocks n >= this reach past the first row's last key (the causal diagonal, or the
    window's right edge): they need the mask. Not clamped to the visited range."""
    last_key_row0 = first_row(m_block, tile_m, group) + seqlen_k - seqlen_q
    if local:
        last_key_row0 = last_key_row0 + right
    # Divided before the clamp (floor and truncation both give <= 0 below 0, then 0).
    return mx(last_key_row0 // tile_n, 0)


def n_block_left_masked(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, left, mx=max, group=None):
    """local: blocks n < this start before the last row's first key (the window's left
    edge): they need the mask. Not clamped to the visited range."""
    first_key_last_row = mx(end_row(m_block, tile_m, group) + seqlen_k - seqlen_q - left, 0)
    return (first_key_last_row + tile_n - 1) // tile_n


def local_block_counts(lo, hi, right_masked, left_masked, mn=min, mx=max):
    """How the blocks after the first (n = hi - 2 down to lo, visited in that order) split into
    (masked, unmasked, masked): the right edge's blocks, the blocks wholly inside every row's
    window, the left edge's. The first block (hi - 1) is always masked."""
    rest = hi - 1 - lo
    first = mx(mn(hi - 1 - right_masked, rest), 0)
    middle = mx(hi - 1 - first - mx(left_masked, lo), 0)
    return first, middle, rest - first - middle
