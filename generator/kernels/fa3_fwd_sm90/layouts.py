"""Shared-memory layouts and register-fragment views for SM90 WGMMA.

The accumulator of one 64xN WGMMA gives each thread a fragment shaped
((2, 2, N/8), MMA_M, MMA_N): two adjacent columns, two rows eight apart, N/8 column
groups. Softmax wants it as (rows, cols); the PV GEMM wants it as an A operand.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as hopper
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum


def smem_layout(dtype, rows: int, cols: int, stages: int | None = None):
    """Row-major (cols contiguous) swizzled tile, staged along a third mode when asked.

    The swizzle width is the widest (128/64/32 B) that divides a row, which is also
    what the TMA box and the tensor-map swizzle must use (see tma_recipe()).
    """
    atom = warpgroup.make_smem_layout_atom(
        hopper.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, dtype, cols), dtype
    )
    shape = (rows, cols) if stages is None else (rows, cols, stages)
    order = (0, 1) if stages is None else (0, 1, 2)
    return cute.tile_to_shape(atom, shape, order=order)


def swizzle_bytes(elem_bytes: int, cols: int) -> int:
    """The swizzle smem_layout() picks for a row of `cols` elements (host-side mirror)."""
    row_bits = cols * elem_bytes * 8
    for sw in (128, 64, 32):
        if row_bits % (sw * 8) == 0:
            return sw
    return 0


def transpose_view(t: cute.Tensor) -> cute.Tensor:
    """Swap the first two modes of a (possibly swizzled) smem tensor without moving data."""
    shape = (t.shape[1], t.shape[0], *t.shape[2:])
    order = (1, 0, *range(2, cute.rank(t)))
    return cute.composition(t, cute.make_ordered_layout(shape, order=order))


def acc_as_rows_cols(acc: cute.Tensor) -> cute.Tensor:
    """View ((2, 2, V), M, N) accumulators as ((2, M), (2, V, N)): rows x columns."""
    flat = cute.make_layout(acc.layout.shape)
    s, d = flat.shape, flat.stride
    rows_cols = cute.make_layout(
        ((s[0][1], s[1]), (s[0][0], s[0][2], s[2])),
        stride=((d[0][1], d[1]), (d[0][0], d[0][2], d[2])),
    )
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, rows_cols))


def acc_as_operand_a(acc: cute.Tensor) -> cute.Tensor:
    """View ((2, 2, V), M, N) accumulators as the A operand of a K=16 WGMMA.

    Two column groups of 8 form one K=16 slice: ((2, 2, 2), M, (V/2, N)).
    """
    split = cute.logical_divide(acc.layout, ((None, None, 2), None, None))
    s, d = split.shape, split.stride
    frag = cute.make_layout(
        ((s[0][0], s[0][1], s[0][2][0]), s[1], (s[0][2][1], s[2])),
        stride=((d[0][0], d[0][1], d[0][2][0]), d[1], (d[0][2][1], d[2])),
    )
    return cute.make_tensor(acc.iterator, frag)


def smem_store_atom(dtype):
    """stmatrix for 16-bit outputs: the epilogue writes O rows to smem for the TMA store."""
    return hopper.get_smem_store_op(LayoutEnum.ROW_MAJOR, dtype, cutlass.Float32)


def register_order_matches(view: cute.Tensor, frag: cute.Tensor) -> bool:
    """Whether every logical element sits at the same register index in both (static layouts,
    evaluated at trace time): then a conversion may walk the registers in their own order."""
    n = cute.size(view)
    return n == cute.size(frag) and all(view.layout(i) == frag.layout(i) for i in range(n))


@cute.jit
def convert_in_register_order(src: cute.Tensor, dst: cute.Tensor, dtype, chunk: cutlass.Constexpr[int] = 8):
    """dst[i] = dtype(src[i]) for every register index i, `chunk` registers at a time.

    Converting through a permuted view can leave ptxas converting one element at a time
    (hd192/256: 40-48 values per thread); contiguous runs give it pairs to pack.
    """
    n = cute.size(src)
    runs = cute.make_layout((chunk, n // chunk))
    s = cute.make_tensor(src.iterator, runs)
    d = cute.make_tensor(dst.iterator, runs)
    for j in cutlass.range_constexpr(n // chunk):
        d[None, j].store(s[None, j].load().to(dtype))
