"""Key-length and causal masking of an S fragment.

Causal is aligned bottom-right as in FlashAttention: query row i sees key j when
j <= i + seqlen_k - seqlen_q.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from .layouts import acc_as_rows_cols


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
    col_limit_k = seqlen_k - n_block * tile_n
    for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
        col_limit = col_limit_k
        if cutlass.const_expr(causal):
            row = m_block * tile_m + coords_rc[r, 0][0]
            col_limit = cutlass.min(col_limit, row + seqlen_k - seqlen_q + 1 - n_block * tile_n)
        for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
            # A select, not an `if`: a branch that writes one register of the fragment
            # becomes a select over the whole fragment, quadratic in its size.
            s_rc[r, c] = -Float32.inf if coords_rc[0, c][1] >= col_limit else s_rc[r, c]
