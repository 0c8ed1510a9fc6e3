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
from cutlass import Int32, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


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


# FA3's exchange (hopper/utils.h permute_Aregs_fp8), one shuffle per 4 bytes where the above
# takes two. P converted in the accumulator's order puts, per 16-column block m, word x = column
# group j = 2m (rows r0 and r1, 2 bytes each) and y = j = 2m + 1 in each thread. Thread T wants
# row r0's columns 16m + 4T..4T+3 in one word and row r1's in the next: both halves of x (T < 2)
# or of y (T >= 2) of lanes 2(T % 2) and 2(T % 2) + 1. So lanes 0 and 3 send x in the first
# shuffle and y in the second, lanes 1 and 2 the other way round; T reads lane PAIR_SRC[T] in
# the first and PAIR_SRC[T] ^ 1 in the second, and two byte permutes (selectors per lane) split
# the two words into the row words. Per 8 bytes: 2 selects, 2 SHFL, 2 PRMT (the above: 4 SHFL,
# 4 shifts, 2 merges).
PAIR_SRC = (0, 3, 1, 2)
# (row r0 selector, row r1 selector) for lanes 0/3 and for lanes 1/2 (prmt: bytes 0-3 first
# operand, 4-7 second).
PAIR_SEL = {True: (0x5410, 0x7632), False: (0x1054, 0x3276)}


def pair_exchange_model(x: list, y: list) -> list:
    """Pure-Python model of convert_p_fp8_pairs on one quad: x[t], y[t] are lane t's two words
    as 4-item byte lists; returns each lane's (row r0 word, row r1 word). Used by the CPU test
    against the A layout's wanted columns."""
    out = []
    for t in range(4):
        lane03 = t in (0, 3)
        sent_u = [x[s] if s in (0, 3) else y[s] for s in range(4)]
        sent_l = [y[s] if s in (0, 3) else x[s] for s in range(4)]
        u, lo = sent_u[PAIR_SRC[t]], sent_l[PAIR_SRC[t] ^ 1]
        both = u + lo
        words = []
        for sel in PAIR_SEL[lane03]:
            words.append([both[(sel >> (4 * k)) & 0xF] for k in range(4)])
        out.append(tuple(words))
    return out


@dsl_user_op
def _prmt_reg(a: Uint32, b: Uint32, sel: Uint32, *, loc=None, ip=None) -> Uint32:
    """prmt.b32 with a selector held in a register (it differs between lanes)."""
    return Uint32(llvm.inline_asm(
        T.i32(),
        [Uint32(x).ir_value(loc=loc, ip=ip) for x in (a, b, sel)],
        "prmt.b32 $0, $1, $2, $3;",
        "=r,r,r,r",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    ))


@cute.jit
def convert_p_fp8_pairs(acc_S: cute.Tensor, tOrP: cute.Tensor, lane):
    """tOrP (e4m3 A fragment) <- acc_S (fp32 accumulator) by FA3's one-shuffle-per-word exchange."""
    n = cute.size(acc_S)
    packed = cute.make_rmem_tensor(n, cutlass.Float8E4M3FN)
    packed.store(acc_S.load().to(cutlass.Float8E4M3FN))  # the accumulator's order: word j = (r0, r1) x 2
    exchange_pairs(packed, tOrP, lane)


@cute.jit
def exchange_pairs(packed: cute.Tensor, tOrP: cute.Tensor, lane):
    """tOrP <- P already in e4m3 in the accumulator's order (`packed`), by the pair exchange."""
    n = cute.size(packed)
    words = cute.recast_tensor(packed, Uint32)
    out = cute.recast_tensor(tOrP, Uint32)
    t = lane % 4
    quad = lane - t
    lane03 = t == 0 or t == 3
    # PAIR_SRC[t] as selects (the quad index is a run-time value).
    src_u = quad + (Int32(0) if t == 0 else (Int32(3) if t == 1 else (Int32(1) if t == 2 else Int32(2))))
    src_l = src_u ^ Int32(1)
    sel_r0 = Uint32(PAIR_SEL[True][0]) if lane03 else Uint32(PAIR_SEL[False][0])
    sel_r1 = Uint32(PAIR_SEL[True][1]) if lane03 else Uint32(PAIR_SEL[False][1])
    for m in cutlass.range_constexpr(n // 8):
        x = words[2 * m]
        y = words[2 * m + 1]
        u = cute.arch.shuffle_sync(x if lane03 else y, src_u)
        lo = cute.arch.shuffle_sync(y if lane03 else x, src_l)
        out[2 * m] = _prmt_reg(u, lo, sel_r0)
        out[2 * m + 1] = _prmt_reg(u, lo, sel_r1)


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
