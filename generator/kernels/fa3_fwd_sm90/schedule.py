"""Tile orders of the persistent scheduler, as plain arithmetic.

The same functions run inside the kernel (traced by the CuTe DSL, with `cutlass.min/max`)
and in the CPU tests (with Python's), so the order the tests check is the order the cubin
walks. Persistent CTAs take a static share of the tiles: no global counter, nothing for the
launcher to zero before each launch.
"""

from __future__ import annotations

from dataclasses import dataclass


def strided_tile(k, cta, ctas, zigzag: bool):
    """The k-th tile of CTA `cta` of `ctas`: round k of the stride. With `zigzag`, odd rounds
    run the other way, so the CTA that took the costliest tile of a round (orders put
    costly tiles first) takes the cheapest of the next."""
    if zigzag:
        odd = k % 2
        return k * ctas + cta + odd * (ctas - 1 - 2 * cta)
    return k * ctas + cta


def next_tile(k, tile, cta, ctas, zigzag: bool):
    """The tile after `tile`, which was round k - 1 of the stride: strided_tile(k, ...)."""
    return strided_tile(k, cta, ctas, zigzag) if zigzag else tile + ctas


def causal_lpt_order(tile, num_m, num_hb, seqlen_k, kv_row_bytes, section_bytes: int, mn=min, mx=max):
    """(m_block, head*batch index) of linear tile `tile` for causal work, longest first.

    Under a causal mask the last query block sees the most keys, so m goes from the last
    block down, with the (head, batch) pairs fastest: a round of the stride then holds tiles
    of (nearly) one cost, and with the zigzag rounds the loads even out (tests/
    test_fa3_schedule.py: within one tile of the ideal on the FA3 grid, under a blocks-visited
    cost model). `section_bytes` > 0 cuts the pairs into sections whose K and V
    (`kv_row_bytes` per key) fit that much L2, each finishing all its m blocks before the
    next starts: fewer pairs in flight, at the price of a less even split.
    """
    if section_bytes == 0:
        return num_m - 1 - tile // num_hb, tile % num_hb
    # floor(S / (seqlen_k * row)) taken as floor(floor(S / row) / seqlen_k): no 32-bit
    # product that could overflow for very long keys.
    per_section = mx(mn(section_bytes // kv_row_bytes // seqlen_k, num_hb), 1)
    first_hb = tile // (per_section * num_m) * per_section
    in_section = tile - first_hb * num_m
    pairs = mn(per_section, num_hb - first_hb)  # the last section may be short
    return num_m - 1 - in_section // pairs, first_hb + in_section % pairs


# ----------------------------------------------------------------------------- causal sections
# The persistent causal walk's order, FwdConfig.causal_order: "all" takes every (head, batch)
# pair's last m block before any pair's next (causal_lpt_order without sections); rounds of
# the stride then hold tiles of one cost, but a pair's K and V come back a pass over all pairs
# later, so when they do not fit L2 they are read from HBM once per m block (at 512 keys,
# hd128, 512 pairs: ~2.5 times, ~450 MB in the shipped 115 us, 3.9 TB/s). "pairs" walks each
# pair's m blocks in a row (sections of one pair): L2 hits, but the costs of a round are then
# mixed and only some shapes even out (tests/test_causal_order.py). "sections" cuts the pairs
# into sections of P, every m block of a section before the next section, with P chosen so a
# section is whole zigzag round pairs of one cost pattern: with C CTAs, P = 2C / k for a k
# that divides both num_m and 2C (k | 2C: P is whole; k | num_m: a section's num_m levels of P
# tiles are num_m / k round pairs, and in each round pair CTA c's two tiles sit at levels
# summing to a constant, so to one cost). k is the largest power of two dividing both (two
# bit operations; the gcd would also take odd factors, for a smaller P). Only where all pairs'
# K and V exceed SECTION_L2_BYTES: below that L2 holds them in any order. The last section
# takes the remainder (a short last section would end the walk on a mixed round).
SECTION_L2_BYTES = 32 * 1024 * 1024


def low_bit(x):
    """The largest power of two dividing x > 0 (x & -x)."""
    return x & (-x)


def section_pairs(order: str, num_m, num_hb, seqlen_k, kv_row_bytes, ctas, mn=min, mx=max):
    """P, the (head, batch) pairs of one section of the persistent causal walk (see above); the
    same arithmetic traced in the kernel (once per CTA) and run on the CPU."""
    if order == "all":
        return num_hb
    if order == "pairs":
        return 1
    # Fits: seqlen_k * kv_row_bytes * num_hb <= SECTION_L2_BYTES, without a 32-bit product.
    fits = 1 - mn(seqlen_k // (SECTION_L2_BYTES // kv_row_bytes // num_hb + 1), 1)
    k = mn(low_bit(num_m), low_bit(2 * ctas))
    sectioned = (1 - fits) * mn(k // 2, 1)  # k = 1 (num_m odd): no section size balances
    return sectioned * mn(num_hb, 2 * ctas // k) + (1 - sectioned) * num_hb


def sectioned_order(tile, num_m, num_hb, pairs_per_section, mn=min, mx=max):
    """(m_block, head*batch index) of linear tile `tile` in sections of `pairs_per_section`
    pairs (the last section also takes the remainder), each section's last m block first with
    its pairs fastest, as causal_lpt_order orders within a section."""
    per = pairs_per_section
    sections = mx(num_hb // per, 1)
    si = mn(tile // (per * num_m), sections - 1)
    first = si * per
    last = (si + 1) // sections  # 1 in the last section
    count = per + last * (num_hb - sections * per)
    within = tile - first * num_m
    return num_m - 1 - within // count, first + within % count


def split_range(n_block_min, n_block_max, split, num_splits, mn=min):
    """[lo, hi) of the key blocks split `split` of `num_splits` visits, out of the tile's
    [n_block_min, n_block_max) (whatever range the mask rules gave): equal runs of
    ceil(blocks / num_splits), so the last splits may be short or empty (lo >= hi). An
    empty split still writes its partial (O = 0, LSE = -inf): the combine weighs it 0."""
    per = (n_block_max - n_block_min + num_splits - 1) // num_splits
    lo = n_block_min + split * per
    return lo, mn(lo + per, n_block_max)


@dataclass(frozen=True)
class TileScheduler:
    """The dense kernel's scheduler: the grid it launches and the order its CTAs walk the
    tiles, one object for the host (grid) and the kernel (first / next / decode). Only
    compile-time facts live here; the CTA index and count are passed in, so the same methods
    run traced (mn/mx = cutlass.min/max) and on the CPU (tests/test_fa3_schedule.py).

    - single: one tile per CTA, grid (m blocks, heads, batch);
    - persistent: min(tiles, max_ctas) CTAs striding over the linear tiles (zigzag rounds
      when causal or windowed);
    - lpt: one tile per CTA on a 1-D grid, causal tiles longest first (causal_lpt_order).
    The kernel keeps the `while tile < num_tiles` statement itself: the DSL traces loops
    only in the kernel's own body, so the loop is written there, its steps come from here.
    """

    kind: str  # "single", "persistent" or "lpt"
    causal: bool
    # A sliding window (bottom-right aligned): a tile's key blocks rise with its m block up to
    # the window's width, as under causal (the first window / tile_m blocks are cheaper), so
    # the persistent walk takes the causal order, longest first with zigzag rounds. In m order
    # the static stride left one CTA in eight with 16 full tiles where the mean was 15.5 mixed
    # ones: 17% over the mean at (4096, 0), 16k keys (tests/test_fa3_schedule.py).
    local: bool = False
    # The varlen form's persistent CTAs zigzag whatever the mask: their tile orders put costly
    # tiles first in both (varlen_tile, varlen_tile_by_keys).
    varlen: bool = False
    # The persistent causal walk's order (section_pairs): "all", "pairs" or "sections".
    causal_order: str = "all"

    @property
    def linear(self) -> bool:
        """Whether CTAs are numbered on a 1-D grid (blockIdx.x is the CTA, gridDim.x the count)."""
        return self.kind in ("persistent", "lpt")

    @property
    def longest_last(self) -> bool:
        """Whether the last m blocks are the costliest (causal, or a window): orders them first."""
        return self.causal or self.local

    @property
    def zigzag(self) -> bool:
        return self.kind == "persistent" and (self.longest_last or self.varlen)

    def grid(self, num_m, heads, batch, max_ctas, mn=min):
        """The launch grid (traced for the DSL's own launcher; the contract has the same rule)."""
        if self.kind == "persistent":
            return (mn(num_m * heads * batch, max_ctas), 1, 1)
        if self.kind == "lpt":
            return (num_m * heads * batch, 1, 1)
        return (num_m, heads, batch)

    def first(self, k, cta, ctas):
        """CTA `cta`'s first tile (k = 0): for single and lpt, its own and only one."""
        return strided_tile(k, cta, ctas, self.zigzag)

    def next(self, k, tile, cta, ctas):
        """The tile after `tile` (round k - 1 of the stride); past num_tiles ends the loop."""
        return next_tile(k, tile, cta, ctas, self.zigzag)

    def decode(self, tile, num_m, heads, batches, seqlen_k, kv_row_bytes, section_bytes, mn=min, mx=max,
               pairs_per_section=None):
        """(m_block, head, batch) of a linear tile. Causal on a 1-D grid: causal_lpt_order,
        or given `pairs_per_section` (causal_order other than "all": section_pairs, made once
        per CTA), sectioned_order over it; otherwise m fastest (CTAs running together share
        one head's K and V in L2), causal m blocks from the last (the longest tiles first
        shorten the tail)."""
        if self.longest_last and self.linear and pairs_per_section is not None:
            m_block, hb = sectioned_order(tile, num_m, heads * batches, pairs_per_section, mn=mn, mx=mx)
            return m_block, hb % heads, hb // heads
        if self.longest_last and self.linear:
            m_block, hb = causal_lpt_order(tile, num_m, heads * batches, seqlen_k, kv_row_bytes, section_bytes,
                                           mn=mn, mx=mx)
            return m_block, hb % heads, hb // heads
        m_block = tile % num_m
        rest = tile // num_m
        head = rest % heads
        batch = rest // heads
        if self.longest_last:
            m_block = num_m - 1 - m_block
        return m_block, head, batch


# ----------------------------------------------------------------------------- fast divmod
# FwdConfig.fast_divmod: the persistent walk's decode with every divisor made once per CTA.
# In the kernel a divisor is a cute.FastDivmodDivisorV2 (multiply-high and shift, CUTLASS's
# FastDivmod: exact for dividends in [0, 2^31)); on the CPU a plain int, so the tests run the
# same arithmetic against decode's.


def decode_divisors(sched: TileScheduler, num_m, heads, batches, heads_kv, make=int):
    """(inner, outer, group): the divisors decode_fast divides by, made once (`make`: the
    device's divisor maker). Causal (pairs fastest): tile // num_hb is tile // heads //
    batches (floor division nests), so heads and batches; otherwise num_m and heads."""
    inner, outer = (heads, batches) if sched.longest_last else (num_m, heads)
    return make(inner), make(outer), make(heads // heads_kv)


def decode_fast(sched: TileScheduler, tile, num_m, divs):
    """(m_block, head, batch, head_kv) of a linear tile, as TileScheduler.decode gives them for
    the persistent walk (no L2 sections), by divmod against decode_divisors' `divs`."""
    inner, outer, group = divs
    rest, a = divmod(tile, inner)
    b, c = divmod(rest, outer)
    if sched.longest_last:
        m_block, head, batch = num_m - 1 - b, a, c
    else:
        m_block, head, batch = a, c, b
    return m_block, head, batch, head // group


# ----------------------------------------------------------------------------- varlen
# The varlen grid is 1-D over (tile, head), head fastest, with at most varlen_tile_bound
# tiles: the bound needs only the packed tensor's rows and the batch size (no host copy of
# cu_seqlens), and at most `batch` tiles per head past the real ones exit at once. Tiles go
# in rounds by m block, last first: round v holds block v of every sequence that has one, so
# the blocks that see the most keys (causal: the last of each sequence; non-causal: those of
# the long sequences, the only ones with high block indices) are dispatched first, and the
# short sequences' tiles fill the tail. inference.FlashFwdSm90Inference.varlen_tile is this
# order in the kernel; the functions below are its reference for the CPU tests.


def varlen_tile_bound(total_rows, batch, tile_m):
    """An upper bound of sum_b ceil(rows_b / tile_m) over sequences with sum_b rows_b <= total_rows."""
    return (total_rows + batch * (tile_m - 1)) // tile_m


# A varlen CTA takes the whole SM: the register split (config.register_split) sums to the SM's
# 64K registers, so one CTA per SM whatever the shared memory.
VARLEN_CTAS_PER_SM = 1


def varlen_ctas(total_rows, batch, tile_m, heads, sm_count, persistent: bool, mn=min):
    """CTAs of the varlen grid (1-D): one per (tile, head) of the bound, or, persistent,
    min(that, sm_count * VARLEN_CTAS_PER_SM) striding over them. The kernel (traced) and the
    contract (varlen_grid_expr) both take it from here."""
    per_head_tiles = varlen_tile_bound(total_rows, batch, tile_m)
    if persistent:
        return mn(per_head_tiles * heads, sm_count * VARLEN_CTAS_PER_SM)
    return per_head_tiles * heads


def varlen_grid_expr(tile_m: int, persistent: bool) -> list:
    """varlen_ctas as the launch contract's postfix expression over its symbols (total_q,
    batch, heads_q, sm_count); tests/test_fa3_schedule.py evaluates both on the same sizes."""
    bound = ["total_q", "batch", tile_m - 1, "*", "+", tile_m, "//", "heads_q", "*"]
    if persistent:
        return bound + ["sm_count", VARLEN_CTAS_PER_SM, "*", "min"]
    return bound


def tiles_from(tiles, v):
    """Tiles with m block >= v: sum_b max(tiles_b - v, 0) (tiles before round v - 1)."""
    return sum(max(n - v, 0) for n in tiles)


def varlen_tile(t, tiles):
    """(batch, m_block) of linear tile t over sequences of `tiles[b]` m blocks each, in rounds of
    descending m block (batches in order inside a round); None past the last tile."""
    total, top = tiles_from(tiles, 0), max(tiles, default=0)
    if t >= total:
        return None
    lo, hi = 0, top  # tiles_from(lo) > t >= tiles_from(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tiles_from(tiles, mid) > t:
            lo = mid
        else:
            hi = mid
    k = t - tiles_from(tiles, lo + 1)
    seen = 0
    for b, n in enumerate(tiles):
        if n > lo:
            if seen == k:
                return b, lo
            seen += 1
    raise AssertionError("unreachable: round lo holds more than k tiles")


def tiles_keyed(tiles, key_blocks, x):
    """Tiles of the sequences with at least x key blocks: sum of tiles[b] where key_blocks[b] >= x."""
    return sum(n for n, kb in zip(tiles, key_blocks) if kb >= x)


def varlen_tile_by_keys(t, tiles, key_blocks):
    """(batch, m_block) of linear tile t, sequences by key blocks descending (batch order among
    equals), each sequence's m blocks from the last; None past the last tile. A non-causal tile
    costs its sequence's key blocks whatever its m block, so this is longest first for the
    persistent CTAs' static stride (varlen_tile's rounds mix costs inside a round: 18% over
    the even split on bench/inference.py's case against 1.6% here, tests/test_fa3_schedule.py).
    Sequences with no keys still own tiles (O = 0, LSE = -inf): the last level, 0."""
    if t >= tiles_keyed(tiles, key_blocks, 0):
        return None
    lo, hi = 0, max(key_blocks, default=0) + 1  # tiles_keyed(lo) > t >= tiles_keyed(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tiles_keyed(tiles, key_blocks, mid) > t:
            lo = mid
        else:
            hi = mid
    k = t - tiles_keyed(tiles, key_blocks, lo + 1)
    before = 0
    for b, (n, kb) in enumerate(zip(tiles, key_blocks)):
        if kb == lo:
            if before + n > k:
                return b, n - 1 - (k - before)
            before += n
    raise AssertionError("unreachable: level lo holds more than k tiles")


def varlen_persistent_walk(tiles, key_blocks, heads, ctas, causal: bool):
    """Each CTA's (batch, m_block, head) in the order the persistent varlen kernel walks them:
    linear tile L = tile * heads + head (heads fastest), tile in varlen_tile's rounds (causal)
    or varlen_tile_by_keys's order (non-causal), L strided over the CTAs by TileScheduler
    (zigzag rounds) while L < real tiles * heads. The CPU reference of the kernel's loop."""
    sched = TileScheduler("persistent", causal, varlen=True)
    total = sum(tiles) * heads
    walks = []
    for cta in range(ctas):
        walk, k = [], 0
        lin = sched.first(k, cta, ctas)
        while lin < total:
            t, head = lin // heads, lin % heads
            b, m = varlen_tile(t, tiles) if causal else varlen_tile_by_keys(t, tiles, key_blocks)
            walk.append((b, m, head))
            k += 1
            lin = sched.next(k, lin, cta, ctas)
        walks.append(walk)
    return walks
