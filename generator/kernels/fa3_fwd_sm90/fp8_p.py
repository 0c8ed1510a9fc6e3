"""P (fp32 softmax output) -> the e4m3 A operand of the PV WGMMA, across the quad's registers.

The fp32 accumulator gives thread T (= lane % 4) of a quad columns 8j + 2T + {0, 1} of each
row; an 8-bit A operand (k = 32) wants columns 32ks + 16h + 4T + {0..3} (layouts checked at
trace time by check_layouts). So every 4 bytes of A come from two threads of the quad,
2(T%2) and 2(T%2)+1, each giving the 2 bytes of column group j = 4ks + 2h + T//2:
- each thread converts its S to e4m3 packed as words [(j0, p0), (j0, p1), (j0+1, p0),
  (j0+1, p1)] (j0 = 4ks + 2h, per row half), so both halves a reader may want sit in one word;
- each reader fetches the word from both sources (two shfl.idx) and keeps half T//2 of each.
Two shuffles per 4 bytes of P: 32 per thread per 128-key block at 64 rows x 2 row halves.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Uint32


def check_layouts(tiled_mma_qk, tiled_mma_pv, tile_m: int, tile_n: int) -> None:
    """Trace-time check that the accumulator and A-operand layouts are the ones above."""
    ident = cute.make_identity_tensor((tile_m, tile_n))
    for t in range(4):
        c = tiled_mma_qk.get_slice(t).partition_C(ident)
        a = tiled_mma_pv.get_slice(t).partition_A(ident)
        for i in range(cute.size(c)):
            p, h, j = i % 2, (i // 2) % 2, i // 4
            want = (8 * h, 8 * j + 2 * t + p)
            if tuple(c[i]) != want:
                raise ValueError(f"fp8 P: accumulator element {i} of thread {t} is {tuple(c[i])}, expected {want}")
        for i in range(cute.size(a)):
            e, r, h, ks = i % 4, (i // 4) % 2, (i // 8) % 2, i // 16
            want = (8 * r, 32 * ks + 16 * h + 4 * t + e)
            if tuple(a[i]) != want:
                raise ValueError(f"fp8 P: A-operand element {i} of thread {t} is {tuple(a[i])}, expected {want}")


@cute.jit
def convert_p_fp8(acc_S: cute.Tensor, tOrP: cute.Tensor, lane):
    """tOrP (e4m3 A fragment) <- acc_S (fp32 accumulator) in the A operand's column order."""
    n = cute.size(acc_S)
    ks = n // 16
    # acc index p + 2r + 4(jj + 2h + 4ks) -> packed byte p + 2jj + 4r + 8h + 16ks.
    src = cute.make_tensor(acc_S.iterator, cute.make_layout((2, 2, 2, 2, ks), stride=(1, 2, 4, 8, 16)))
    packed = cute.make_rmem_tensor(n, cutlass.Float8E4M3FN)
    dst = cute.make_tensor(packed.iterator, cute.make_layout((2, 2, 2, 2, ks), stride=(1, 4, 2, 8, 16)))
    dst.store(src.load().to(cutlass.Float8E4M3FN))
    words = cute.recast_tensor(packed, Uint32)
    out = cute.recast_tensor(tOrP, Uint32)
    quad = lane - lane % 4
    src_a = quad + 2 * (lane % 2)
    src_b = src_a + 1
    shift = Uint32(16) * Uint32((lane % 4) // 2)
    for w in cutlass.range_constexpr(n // 4):
        a = cute.arch.shuffle_sync(words[w], src_a)
        b = cute.arch.shuffle_sync(words[w], src_b)
        out[w] = ((a >> shift) & Uint32(0xFFFF)) | (((b >> shift) & Uint32(0xFFFF)) << Uint32(16))


# With V transposed in shared memory by our own warps (v_transpose.py, local_p), the keys of
# sVt can be laid out in the order the accumulator already holds them: within each 16-column
# half of a 32-key step, A column 4T + e is key 2T + e % 2 + 8 (e // 2). Then thread T's
# A elements are its own accumulator values and P needs no shuffle (FA3 permutes V's keys so).
def local_key(col: int) -> int:
    """The key sVt column `col` holds under local_p (a permutation within each 16 columns)."""
    c = col % 16
    return col - c + 2 * (c // 4) + (c % 4) % 2 + 8 * ((c % 4) // 2)


def check_local_layouts(tiled_mma_qk, tiled_mma_pv, tile_m: int, tile_n: int) -> None:
    """Trace time: A element i of thread t, column c, is accumulator element local_index(i) of
    the same thread, key local_key(c), same row."""
    ident = cute.make_identity_tensor((tile_m, tile_n))
    for t in range(4):
        c = tiled_mma_qk.get_slice(t).partition_C(ident)
        a = tiled_mma_pv.get_slice(t).partition_A(ident)
        for i in range(cute.size(a)):
            row, col = tuple(a[i])
            src = tuple(c[local_index(i)])
            if src != (row, local_key(col)):
                raise ValueError(f"fp8 local P: A element {i} of thread {t} ({row}, {col}) takes accumulator "
                                 f"{src}, expected ({row}, {local_key(col)})")


def local_index(i: int) -> int:
    """A element i = e + 4r + 8h + 16ks -> accumulator element p + 2r + 4j, j = 4ks + 2h + e // 2."""
    e, r, h, ks = i % 4, (i // 4) % 2, (i // 8) % 2, i // 16
    return e % 2 + 2 * r + 4 * (4 * ks + 2 * h + e // 2)


@cute.jit
def convert_p_fp8_local(acc_S: cute.Tensor, tOrP: cute.Tensor):
    """tOrP <- acc_S in e4m3 under local_p: a register reindex, no shuffles."""
    n = cute.size(acc_S)
    ks = n // 16
    # Index (e0, e1, r, h, ks) of A = e0 + 2e1 + 4r + 8h + 16ks reads acc e0 + 4e1 + 2r + 8h + 16ks.
    src = cute.make_tensor(acc_S.iterator, cute.make_layout((2, 2, 2, 2, ks), stride=(1, 4, 2, 8, 16)))
    dst = cute.make_tensor(tOrP.iterator, cute.make_layout((2, 2, 2, 2, ks), stride=(1, 2, 4, 8, 16)))
    dst.store(src.load().to(cutlass.Float8E4M3FN))
