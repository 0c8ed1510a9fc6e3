"""FA3's descale folding for e4m3 q/k/v: one home for the dense and the inference forms.

mDescale is (3, batch, heads_kv) float32, the q, k and v descales stacked (each FA3's
(batch, heads_kv)). S = q k^T * q_descale * k_descale * softmax_scale, so the q and k
descales go into the softmax's log2 scale; O = P v * v_descale is linear in v_descale, so
it goes into the final 1 / rowsum (a split's partial O takes it too: the combine's weights
are the LSEs, which already hold the q/k descales).

With per-block q and k descales (FwdConfig.descale_block, the dense forward) the q and k
scales vary along the rows and the key blocks, so they cannot be folded once per tile:
block_q_scale gives a thread its rows' q scale and softmax.BlockScaledSoftmax multiplies in
each key block's k scale; v's descale stays per (batch, head_kv) and is folded as here.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


def fold_scale(mDescale, batch, head_kv, softmax_scale_log2):
    """(log2 softmax scale with the q and k descales in it, v descale) of (batch, head_kv)."""
    scale_log2 = softmax_scale_log2 * mDescale[0, batch, head_kv] * mDescale[1, batch, head_kv]
    return scale_log2, mDescale[2, batch, head_kv]


def block_q_scale(mDescaleQ, batch, head, row, block_q: int, softmax_scale_log2):
    """descale_block: the log2 softmax scale times q's descale of the block holding `row`
    (mDescaleQ (batch, heads_q, q blocks): q heads, as quantize_fp8 gives them). Rows past
    seqlen_q read the last block: their outputs are never stored."""
    qb = cutlass.min(row // block_q, mDescaleQ.shape[2] - 1)
    return softmax_scale_log2 * mDescaleQ[batch, head, qb]


def fold_v(inv_sum, v_descale) -> None:
    """inv_sum (1 / rowsum per row, registers) *= v_descale, in place. Plain Python over a
    static size: tracing it unrolls what range_constexpr would."""
    for r in range(cute.size(inv_sum)):
        inv_sum[r] = inv_sum[r] * v_descale
