"""Online softmax over one consumer warpgroup's S fragment, in the exp2 domain.

Each thread holds two rows (r, r+8) of the 64-row slab; a row's columns are spread over
the 4 threads of a quad, so row reductions finish with two butterfly shuffles.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .exp2_poly import COEFFS, ROUND_MAGIC, X_MIN, emulated_column
from .layouts import acc_as_rows_cols

LN2 = math.log(2.0)
LOG2E = math.log2(math.e)


class OnlineSoftmax:
    def __init__(self, scale_log2: Float32, rows: int, in_order_sum: bool = False, exp2_emu_eighths: int = 0,
                 exp2_emu_degree: int = 3, rescale_threshold: float = 0.0, p_scale_log2: float = 0.0):
        self.scale_log2 = scale_log2
        self.rows = rows
        # exp2 of `exp2_emu_eighths` of every 8 columns of a row on the FMA pipe (exp2_fma),
        # the rest on the MUFU: where the MUFU is the limit, the two pipes share the work.
        self.emu_eighths = exp2_emu_eighths
        self.emu_degree = exp2_emu_degree
        # > 0: a row keeps its stale maximum until a block raises it by more than this (log2
        # units), so P <= 2^threshold; O, its factor's exp2 and the row sum's rescale are skipped
        # when no row of the warp needs one (a warp vote, kept in self.rescaled for rescale_o).
        # Sum and O share the reference maximum, so finish() stays exact (FA4's rescaling).
        self.rescale_threshold = rescale_threshold
        self.rescaled = None
        # > 0: P = 2^(s - (max - k)), so e4m3's P keeps its small values out of the subnormals
        # (below 2^-6) and a fresh row maximum's P is 2^k, exact. The row sum is of the same P,
        # so 2^k cancels in O / rowsum; finish() takes it out of the LSE (and adds it to a sink).
        self.p_scale_log2 = p_scale_log2
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
        if cutlass.const_expr(self.rescale_threshold > 0 and not is_first):
            return self._step_lazy(acc_S)
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
            self._exp2_row(s_rc, r, m_safe)
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
    def _step_lazy(self, acc_S: cute.Tensor) -> cute.Tensor:
        """step() past the first block under rescale_threshold: the maximum moves (and O, the
        row sum are rescaled) only where a warp's vote says some row grew past the threshold."""
        s_rc = acc_as_rows_cols(acc_S)
        row_scale = cute.make_rmem_tensor(self.rows, Float32)
        row_scale.fill(1.0)
        m_cand = cute.make_rmem_tensor(self.rows, Float32)
        grow = False
        for r in cutlass.range_constexpr(self.rows):
            m_local = cute.arch.fmax(_tree_reduce(s_rc, r, cute.arch.fmax), self.row_max[r])
            m_cand[r] = cute.arch.warp_reduction_max(m_local, threads_in_group=4)
            # A row that saw no key yet has -inf: any key makes it grow; -inf - -inf is NaN, no.
            grow = grow | ((m_cand[r] - self.row_max[r]) * self.scale_log2 > Float32(self.rescale_threshold))
        self._vote_rescale(grow, m_cand, row_scale, self.scale_log2)
        self._exp2_rows_and_sum(s_rc, self._exp2_row)
        return row_scale

    @cute.jit
    def _vote_rescale(self, grow, m_cand: cute.Tensor, row_scale: cute.Tensor, to_log2):
        """The lazy steps' conditional rescale: where any row of the warp grew (the vote), every
        row's maximum moves to m_cand and its sum and O factor (row_scale) take
        2^((max - m_cand) * to_log2); to_log2 None: the maxima are in log2 units already."""
        rescaled = cute.arch.vote_any_sync(grow)
        # Locals: the `if` below runs on the device and cannot carry `self`.
        row_max, row_sum = self.row_max, self.row_sum
        if rescaled:
            for r in cutlass.range_constexpr(self.rows):
                m_safe = m_cand[r] if m_cand[r] != -Float32.inf else Float32(0.0)
                if cutlass.const_expr(to_log2 is None):
                    scale = cute.math.exp2(row_max[r] - m_safe, fastmath=True)
                else:
                    scale = cute.math.exp2((row_max[r] - m_safe) * to_log2, fastmath=True)
                row_scale[r] = scale
                row_sum[r] = row_sum[r] * scale
                row_max[r] = m_cand[r]
        self.rescaled = rescaled

    @cute.jit
    def _exp2_rows_and_sum(self, s_rc: cute.Tensor, exp2_row):
        """The lazy steps' tail: each row of S <- P against its (possibly stale) maximum by
        exp2_row(s_rc, r, m_safe) (_exp2_row, or the block-scaled form), added to its sum."""
        for r in cutlass.range_constexpr(self.rows):
            m = self.row_max[r]
            m_safe = m if m != -Float32.inf else Float32(0.0)
            exp2_row(s_rc, r, m_safe)
            if cutlass.const_expr(self.in_order_sum):
                self.row_sum[r] = s_rc[r, None].load().reduce(cute.ReductionOp.ADD, self.row_sum[r], 0)
            else:
                self.row_sum[r] = self.row_sum[r] + _tree_reduce(s_rc, r, _add)

    @cute.jit
    def rescale_o(self, acc_O: cute.Tensor, row_scale: cute.Tensor):
        """O *= the last step's factors; under rescale_threshold only when that step's vote
        moved a maximum (the factors are all 1 otherwise)."""
        if cutlass.const_expr(self.rescale_threshold > 0):
            rescaled = self.rescaled
            if rescaled:
                rescale_rows(acc_O, row_scale)
        else:
            rescale_rows(acc_O, row_scale)

    @cute.jit
    def _exp2_row(self, s_rc: cute.Tensor, r: cutlass.Constexpr[int], m_safe: Float32):
        """Row r of S <- 2^(S * scale - m * scale + p_scale_log2), emu_eighths of each 8 columns on the FMA pipe."""
        if cutlass.const_expr(self.emu_eighths == 0 and self.p_scale_log2 == 0):
            row = s_rc[r, None].load()
            s_rc[r, None].store(cute.math.exp2(row * self.scale_log2 - m_safe * self.scale_log2, fastmath=True))
        elif cutlass.const_expr(self.emu_eighths == 0):
            row = s_rc[r, None].load()
            m_scaled = m_safe * self.scale_log2 - Float32(self.p_scale_log2)
            s_rc[r, None].store(cute.math.exp2(row * self.scale_log2 - m_scaled, fastmath=True))
        else:
            m_scaled = m_safe * self.scale_log2
            if cutlass.const_expr(self.p_scale_log2 != 0):
                m_scaled = m_scaled - Float32(self.p_scale_log2)
            for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
                x = s_rc[r, c] * self.scale_log2 - m_scaled
                if cutlass.const_expr(emulated_column(c, self.emu_eighths)):
                    s_rc[r, c] = exp2_fma(x, self.emu_degree)
                else:
                    s_rc[r, c] = cute.math.exp2(x, fastmath=True)

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
                    total = total + (cute.math.exp2(sink_log2 - self._shifted(m), fastmath=True)
                                     if has else Float32(0.0))
                else:
                    m = sink_log2 / self.scale_log2 if m == -Float32.inf else m
                    self.row_max[r] = m
                    total = total + cute.math.exp2(sink_log2 - self._shifted(m), fastmath=True)
            empty = total == Float32(0.0) or total != total
            inv[r] = Float32(0.0) if empty else cute.arch.rcp_approx(total)
            lse[r] = (
                -Float32.inf
                if empty
                else (self._shifted(self.row_max[r]) + cute.math.log2(total, fastmath=True)) * LN2
            )
        return inv, lse

    def _shifted(self, m):
        """m * scale_log2 - p_scale_log2: the log2 offset P = 2^(s * scale_log2 - this) took."""
        if self.p_scale_log2 == 0:  # a trace-time float: the unshifted form, as before the switch
            return m * self.scale_log2
        return m * self.scale_log2 - Float32(self.p_scale_log2)


class BlockScaledSoftmax(OnlineSoftmax):
    """OnlineSoftmax with a scale per key block (e4m3 block descales, FwdConfig.descale_block).

    S_ij's log2 exponent is s_ij * a * c_j: a = softmax_scale_log2 * q's descale of this
    thread's rows (one 16-row group, so one value), c_j k's descale of key block j. The row
    maximum is kept in those scaled units, m = max(m, rawmax_j * a * c_j) (a * c_j > 0 keeps
    the raw maximum the scaled one), so P = 2^(fma(s, a * c_j, -m)) costs the one FFMA per
    score of the per-head form; rescales are 2^(m_old - m_new), the lazy rescale's test is on
    scaled units, and the LSE is (m + log2(sum)) * ln 2. c_j is read one block ahead: the key
    blocks run n_block_max - 1 down, one at a time, so block j+1's load is issued in block j.
    """

    def __init__(self, q_scale_log2: Float32, rows: int, mDescaleK, batch, head_kv, n_block_first,
                 blocks_per_scale: int, in_order_sum: bool = False, exp2_emu_eighths: int = 0,
                 exp2_emu_degree: int = 3, rescale_threshold: float = 0.0, p_scale_log2: float = 0.0):
        super().__init__(q_scale_log2, rows, in_order_sum, exp2_emu_eighths, exp2_emu_degree, rescale_threshold,
                         p_scale_log2)
        self.k_descale = mDescaleK
        self.batch, self.head_kv = batch, head_kv
        self.blocks_per_scale = blocks_per_scale
        # [0]: c of the block the next step takes; n_next[0]: that block's index.
        self.k_scale = cute.make_rmem_tensor(1, Float32)
        self.n_next = cute.make_rmem_tensor(1, cutlass.Int32)
        self.n_next[0] = n_block_first
        self.k_scale[0] = self._load_k_scale(n_block_first)

    def _load_k_scale(self, n_block):
        kb = n_block
        if cutlass.const_expr(self.blocks_per_scale > 1):
            kb = n_block // self.blocks_per_scale
        return Float32(self.k_descale[self.batch, self.head_kv, kb])

    def _block_scale(self) -> Float32:
        """This step's a * c_j, and block j+1's c loaded for the next step (a block index
        below 0 past the last block is clamped: a read that is never used)."""
        sc = self.scale_log2 * self.k_scale[0]
        n = self.n_next[0] - 1
        self.n_next[0] = n
        self.k_scale[0] = self._load_k_scale(cutlass.max(n, cutlass.Int32(0)))
        return sc

    @cute.jit
    def step(self, acc_S: cute.Tensor, is_first: cutlass.Constexpr[bool]) -> cute.Tensor:
        sc = self._block_scale()
        if cutlass.const_expr(self.rescale_threshold > 0 and not is_first):
            return self._step_lazy_scaled(acc_S, sc)
        s_rc = acc_as_rows_cols(acc_S)
        row_scale = cute.make_rmem_tensor(self.rows, Float32)
        for r in cutlass.range_constexpr(self.rows):
            m_raw = cute.arch.warp_reduction_max(_tree_reduce(s_rc, r, cute.arch.fmax), threads_in_group=4)
            m_new = m_raw * sc  # -inf stays -inf (sc > 0)
            if cutlass.const_expr(not is_first):
                m_new = cute.arch.fmax(m_new, self.row_max[r])
            m_prev = self.row_max[r]
            self.row_max[r] = m_new
            m_safe = m_new if m_new != -Float32.inf else Float32(0.0)
            self._exp2_row_scaled(s_rc, r, m_safe, sc)
            if cutlass.const_expr(is_first):
                row_scale[r] = Float32(1.0)
                seed = Float32(0.0)
            else:
                scale = cute.math.exp2(m_prev - m_safe, fastmath=True)
                row_scale[r] = scale
                seed = self.row_sum[r] * scale
            if cutlass.const_expr(self.in_order_sum):
                self.row_sum[r] = s_rc[r, None].load().reduce(cute.ReductionOp.ADD, seed, 0)
            elif cutlass.const_expr(is_first):
                self.row_sum[r] = _tree_reduce(s_rc, r, _add)
            else:
                self.row_sum[r] = seed + _tree_reduce(s_rc, r, _add)
        return row_scale

    @cute.jit
    def _step_lazy_scaled(self, acc_S: cute.Tensor, sc: Float32) -> cute.Tensor:
        """_step_lazy in scaled units: a row grows when rawmax * a * c_j passes its maximum by
        more than the threshold (log2 units, as the per-head test's)."""
        s_rc = acc_as_rows_cols(acc_S)
        row_scale = cute.make_rmem_tensor(self.rows, Float32)
        row_scale.fill(1.0)
        m_cand = cute.make_rmem_tensor(self.rows, Float32)
        grow = False
        for r in cutlass.range_constexpr(self.rows):
            m_raw = cute.arch.warp_reduction_max(_tree_reduce(s_rc, r, cute.arch.fmax), threads_in_group=4)
            m_cand[r] = cute.arch.fmax(m_raw * sc, self.row_max[r])
            # -inf - -inf is NaN, which compares false: a row that saw no key does not grow.
            grow = grow | ((m_cand[r] - self.row_max[r]) > Float32(self.rescale_threshold))
        self._vote_rescale(grow, m_cand, row_scale, None)
        self._exp2_rows_and_sum(s_rc, lambda s, r, m_safe: self._exp2_row_scaled(s, r, m_safe, sc))
        return row_scale

    @cute.jit
    def _exp2_row_scaled(self, s_rc: cute.Tensor, r: cutlass.Constexpr[int], m_safe: Float32, sc: Float32):
        """Row r of S <- 2^(S * sc - (m - p_scale_log2)), m already in scaled units."""
        m_scaled = m_safe
        if cutlass.const_expr(self.p_scale_log2 != 0):
            m_scaled = m_safe - Float32(self.p_scale_log2)
        if cutlass.const_expr(self.emu_eighths == 0):
            row = s_rc[r, None].load()
            s_rc[r, None].store(cute.math.exp2(row * sc - m_scaled, fastmath=True))
        else:
            for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
                x = s_rc[r, c] * sc - m_scaled
                if cutlass.const_expr(emulated_column(c, self.emu_eighths)):
                    s_rc[r, c] = exp2_fma(x, self.emu_degree)
                else:
                    s_rc[r, c] = cute.math.exp2(x, fastmath=True)

    def finish(self, sink=None, per_row: bool = False, may_be_absent: bool = False) -> tuple[cute.Tensor, cute.Tensor]:
        """OnlineSoftmax.finish with the maximum in scaled units (_shifted below); no sink: its
        logit would enter against a maximum in the other units (e4m3 builds no model variants)."""
        if sink is not None:
            raise ValueError("BlockScaledSoftmax takes no sink (e4m3 builds no model variants)")
        return OnlineSoftmax.finish(self)

    def _shifted(self, m):
        """The maximum is in scaled units already: only the P shift comes off."""
        if self.p_scale_log2 == 0:
            return m
        return m - Float32(self.p_scale_log2)


def _add(a, b):
    return a + b


def _f32_hex(v: float) -> str:
    import struct

    return "0f%08X" % struct.unpack("<I", struct.pack("<f", v))[0]


@dsl_user_op
def exp2_fma(x: Float32, degree: int, *, loc=None, ip=None) -> Float32:
    """2^x without the MUFU, exp2_poly's steps (its numpy model is the same arithmetic):
    FMNMX, FADD.RM, 2 FADD, `degree` FFMA, then SHL + IADD (one LEA). x <= 127."""
    cs = [_f32_hex(c) for c in COEFFS[degree]]
    horner = [f"fma.rn.f32 p, p, f, {c};" for c in reversed(cs[:-1])]
    asm = "\n".join([
        "{", ".reg .f32 xc, xr, xb, f, p;", ".reg .b32 xi, pi;",
        f"max.f32 xc, $1, {_f32_hex(X_MIN)};",
        f"add.rm.f32 xr, xc, {_f32_hex(ROUND_MAGIC)};",
        f"sub.rn.f32 xb, xr, {_f32_hex(ROUND_MAGIC)};",
        "sub.rn.f32 f, xc, xb;",
        f"mov.f32 p, {cs[-1]};",
        *horner,
        "fma.rn.f32 p, p, f, 0f3F800000;",
        "mov.b32 xi, xr;", "mov.b32 pi, p;",
        "shl.b32 xi, xi, 23;",
        "add.s32 xi, xi, pi;",
        "mov.b32 $0, xi;", "}",
    ])
    return Float32(llvm.inline_asm(
        T.f32(), [Float32(x).ir_value(loc=loc, ip=ip)], asm, "=f,f",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    ))


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
