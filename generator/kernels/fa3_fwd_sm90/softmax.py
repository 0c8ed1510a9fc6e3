"""Online softmax over one consumer warpgroup's S fragment, in the exp2 domain.

Each thread holds two rows (r, r+8) of the 64-row slab; a row's columns are spread over
the 4 threads of a quad, so row reductions finish with two butterfly shuffles.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32

from .layouts import acc_as_rows_cols

LN2 = math.log(2.0)
LOG2E = math.log2(math.e)


class OnlineSoftmax:
    def __init__(self, scale_log2: Float32, rows: int, in_order_sum: bool = False):
        self.scale_log2 = scale_log2
        self.rows = rows
        # How a row's probabilities are summed. "tree": four independent chains, short
        # latency. In order, seeded with the rescaled running sum: one long chain, which is
        # what makes ptxas hoist the FFMAs and part of the exp2s above the PV GEMM's wait, as
        # in FA4's SM90 loop (same instruction counts, FA4's order; SASS compared on the CPU,
        # not yet timed). Summation order changes fp32 rounding slightly.
        self.in_order_sum = in_order_sum
        self.row_max = cute.make_rmem_tensor(rows, Float32)
        self.row_sum = cute.make_rmem_tensor(rows, Float32)

    @cute.jit
    def step(self, acc_S: cute.Tensor, is_first: cutlass.Constexpr[bool]) -> cute.Tensor:
        """Turn S into unnormalised P in place; return each row's factor for O."""
        s_rc = acc_as_rows_cols(acc_S)
        row_scale = cute.make_rmem_tensor(self.rows, Float32)
        for r in cutlass.range_constexpr(self.rows):
            m_local = _tree_reduce(s_rc, r, cute.arch.fmax)
            if cutlass.const_expr(not is_first):
                m_local = cute.arch.fmax(m_local, self.row_max[r])
            m_new = cute.arch.warp_reduction_max(m_local, threads_in_group=4)
            m_prev = self.row_max[r]
            self.row_max[r] = m_new
            # A row with every key masked so far keeps max -inf; use 0 so exp2 gives 0, not NaN.
            m_safe = m_new if m_new != -Float32.inf else Float32(0.0)
            row = s_rc[r, None].load()
            s_rc[r, None].store(cute.math.exp2(row * self.scale_log2 - m_safe * self.scale_log2, fastmath=True))
            if cutlass.const_expr(self.in_order_sum):
                seed = Float32(0.0)
                if cutlass.const_expr(is_first):
                    row_scale[r] = Float32(1.0)
                else:
                    scale = cute.math.exp2((m_prev - m_safe) * self.scale_log2, fastmath=True)
                    row_scale[r] = scale
                    seed = self.row_sum[r] * scale
                self.row_sum[r] = s_rc[r, None].load().reduce(cute.ReductionOp.ADD, seed, 0)
            else:
                p_sum = _tree_reduce(s_rc, r, _add)
                if cutlass.const_expr(is_first):
                    row_scale[r] = Float32(1.0)
                    self.row_sum[r] = p_sum
                else:
                    scale = cute.math.exp2((m_prev - m_safe) * self.scale_log2, fastmath=True)
                    row_scale[r] = scale
                    self.row_sum[r] = self.row_sum[r] * scale + p_sum
        return row_scale

    @cute.jit
    def finish(self, sink=None, per_row: cutlass.Constexpr[bool] = False,
               may_be_absent: cutlass.Constexpr[bool] = False) -> tuple[cute.Tensor, cute.Tensor]:
        """(1/row_sum per row, natural-log LSE per row); fully masked rows give O = 0, LSE = -inf.

        `sink` (natural-log logit, FA4's learnable_sink) is one more column of every row that
        counts in the denominator and the LSE but has no value: LSE = log(sum_j exp(s_j) +
        exp(sink)); a row that sees no key gets O = 0 and LSE = sink, as in FA4.

        The inference forms (inference.py): `per_row`, sink is a tensor of one logit per row
        (pack-GQA rows are of different heads); `may_be_absent`, a sink of -inf is no sink (the
        split-KV splits but one, so the combine counts it once): a row that sees no key then
        stays O = 0, LSE = -inf."""
        inv = cute.make_rmem_tensor(self.rows, Float32)
        lse = cute.make_rmem_tensor(self.rows, Float32)
        for r in cutlass.range_constexpr(self.rows):
            total = cute.arch.warp_reduction_sum(self.row_sum[r], threads_in_group=4)
            if cutlass.const_expr(sink is not None):
                # After the quad's reduction: the sink enters each row once. With no key seen,
                # the sink is the row's maximum.
                sink_r = sink
                if cutlass.const_expr(per_row):
                    sink_r = sink[r]
                sink_log2 = sink_r * LOG2E
                m = self.row_max[r]
                if cutlass.const_expr(may_be_absent):
                    has = sink_log2 != -Float32.inf
                    m = sink_log2 / self.scale_log2 if m == -Float32.inf and has else m
                    self.row_max[r] = m
                    total = total + (cute.math.exp2(sink_log2 - m * self.scale_log2, fastmath=True)
                                     if has else Float32(0.0))
                else:
                    m = sink_log2 / self.scale_log2 if m == -Float32.inf else m
                    self.row_max[r] = m
                    total = total + cute.math.exp2(sink_log2 - m * self.scale_log2, fastmath=True)
            empty = total == Float32(0.0) or total != total
            inv[r] = Float32(0.0) if empty else cute.arch.rcp_approx(total)
            lse[r] = (
                -Float32.inf
                if empty
                else (self.row_max[r] * self.scale_log2 + cute.math.log2(total, fastmath=True)) * LN2
            )
        return inv, lse


def _add(a, b):
    return a + b


@cute.jit
def _tree_reduce(t_rc: cute.Tensor, r: cutlass.Constexpr[int], op) -> Float32:
    """Reduce row r with four independent chains: a single chain of 64 dependent ops
    would put its whole latency on the softmax's critical path."""
    n = cute.size(t_rc, mode=[1])
    part = [t_rc[r, i] for i in range(4)]
    for i in cutlass.range_constexpr(4, n, 4):
        for j in cutlass.range_constexpr(4):
            part[j] = op(part[j], t_rc[r, i + j])
    return op(op(part[0], part[1]), op(part[2], part[3]))


@cute.jit
def apply_softcap(acc_S: cute.Tensor, pre_scale: Float32):
    """S <- tanh(S * pre_scale) in place, with pre_scale = softmax_scale / softcap: the softmax
    then runs with scale_log2 = softcap * log2(e), so its exponent is
    softcap * tanh(s * softmax_scale / softcap) in the exp2 domain (FlashAttention's softcap).
    tanh.approx.f32 on the MUFU: one op per score beside the softmax's exp2."""
    s = acc_S.load()
    acc_S.store(cute.math.tanh(s * pre_scale, fastmath=True))


@cute.jit
def rescale_rows(acc_O: cute.Tensor, row_scale: cute.Tensor):
    """Multiply each row of an accumulator fragment by its factor."""
    o_rc = acc_as_rows_cols(acc_O)
    for r in cutlass.range_constexpr(cute.size(row_scale)):
        o_rc[r, None].store(o_rc[r, None].load() * row_scale[r])
