"""Which key blocks a query tile visits and which of them need a mask: plain integer
arithmetic, the same for Python ints (tests/test_fa4_mask.py checks it against a per-element
rule) and for the kernel's runtime values (pass cutlass.min / cutlass.max).

Causal is aligned bottom-right as in FlashAttention and fa3_fwd: query row i sees key j when
j <= i + seqlen_k - seqlen_q.
"""

from __future__ import annotations


def key_blocks(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, causal: bool, mn=min, mx=max):
    """Key blocks 0 .. n-1 the tile visits: every block holding a key some row of the tile
    sees. At least 1: a tile whose rows see no key still visits block 0, fully masked
    (O = 0, LSE = -inf)."""
    n = (seqlen_k + tile_n - 1) // tile_n
    if causal:
        # Keys the tile's last row sees: (m_block + 1) * tile_m + seqlen_k - seqlen_q (may be <= 0).
        seen = mx((m_block + 1) * tile_m + seqlen_k - seqlen_q, 0)
        n = mn(n, (seen + tile_n - 1) // tile_n)
    return mx(n, 1)


def first_masked_block(m_block, seqlen_q, seqlen_k, tile_m: int, tile_n: int, causal: bool, mn=min, mx=max):
    """The first key block some element of which the tile must mask: blocks before it are
    wholly visible to every row of the tile (no key past seqlen_k, none past a row's diagonal)."""
    first = seqlen_k // tile_n  # the key tail starts in this block
    if causal:
        # Block n is wholly visible to the tile's first row iff (n + 1) * tile_n <= its key count.
        seen = mx(m_block * tile_m + seqlen_k - seqlen_q + 1, 0)
        first = mn(first, seen // tile_n)
    return first
