"""Values the NVVM optimizer may not recompute inside a loop (FwdConfig.pin_loop_invariants).

Under register pressure NVVM rematerialises cheap loop invariants at their uses: in the
(192, 128) causal key-block loop it rebuilds the twelve Q descriptors of the QK^T GEMM (an OR
and a move each, per k slice), the K and V stages' descriptor bases (five uniform ops each) and
the consumer-release lane test (S2R + LOP3 + P2R + ISETP) every block, where FA4's loop keeps
them in registers (bench/results/2026-12-01-cpu/dv128-sass.md). Passing a value through an empty
inline asm (`mov`) makes it opaque: NVVM cannot recompute it, so it stays live across the loop
and ptxas keeps it in a (uniform) register. The value is unchanged.
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu.tcgen05 import int_to_smem_descriptor, smem_descriptor_to_int
from cutlass.cutlass_dsl import T, dsl_user_op


@dsl_user_op
def pin_i64(x: Int64, *, loc=None, ip=None) -> Int64:
    """x, through an opaque mov.b64."""
    return Int64(llvm.inline_asm(
        T.i64(), [Int64(x).ir_value(loc=loc, ip=ip)], "mov.b64 $0, $1;", "=l,l",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    ))


@dsl_user_op
def pin_i32(x: Int32, *, loc=None, ip=None) -> Int32:
    """x, through an opaque mov.b32."""
    return Int32(llvm.inline_asm(
        T.i32(), [Int32(x).ir_value(loc=loc, ip=ip)], "mov.b32 $0, $1;", "=r,r",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    ))


def pin_desc_fragment(frag: cute.Tensor) -> cute.Tensor:
    """A GMMA shared-memory descriptor fragment (one k slice of make_fragment_A/B) whose
    descriptor is pinned: the same descriptor and layout, computed once where this is called."""
    desc = pin_i64(smem_descriptor_to_int(frag.iterator))
    return cute.make_tensor(int_to_smem_descriptor(desc), frag.layout)
