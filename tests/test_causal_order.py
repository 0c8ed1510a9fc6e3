"""The persistent causal walk's orders (FwdConfig.causal_order, schedule.section_pairs /
sectioned_order), on the CPU with the functions the kernel traces: every order visits every tile
once; "sections" keeps the static stride's balance where "pairs" loses it; and an LRU model of
L2 shows what both are for: at 512 keys, hd128, the all-pairs order reads K and V from HBM ~2.5
times over, the sectioned one once. Cost model: a tile costs the key blocks it visits."""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import CAUSAL_ORDERS
from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import (
    SECTION_L2_BYTES, TileScheduler, causal_lpt_order, low_bit, section_pairs, sectioned_order)

SMS = 132
ROW = 2 * 128 * 2  # hd128 K and V, bytes per key


def blocks(m_block, tm, tn, s):
    """Key blocks a causal tile of a square problem visits (tile_work's rule)."""
    return math.ceil(min((m_block + 1) * tm, s) / tn)


def walks(sched: TileScheduler, num_m, pairs, seqlen, row=ROW, ctas=SMS):
    """Each CTA's (m_block, pair) tiles in the order the kernel's loop takes them."""
    num_tiles = num_m * pairs
    ctas = min(ctas, num_tiles)
    per = section_pairs(sched.causal_order, num_m, pairs, seqlen, row, ctas)
    out = []
    for cta in range(ctas):
        k, tile, walk = 0, sched.first(0, cta, ctas), []
        while tile < num_tiles:
            m, head, _ = sched.decode(tile, num_m, pairs, 1, seqlen, row, 0, pairs_per_section=per)
            walk.append((m, head))
            k += 1
            tile = sched.next(k, tile, cta, ctas)
        out.append(walk)
    return out


def makespan(order: str, tm, tn, s, pairs):
    """Largest per-CTA key blocks over the mean's lower bound (1.0: an even split)."""
    num_m = math.ceil(s / tm)
    loads = [sum(blocks(m, tm, tn, s) for m, _ in w) for w in walks(TileScheduler("persistent", True, causal_order=order),
                                                                   num_m, pairs, s)]
    ideal = max(sum(loads) / len(loads), blocks(num_m - 1, tm, tn, s))
    return max(loads) / ideal


@pytest.mark.parametrize("order", CAUSAL_ORDERS)
@pytest.mark.parametrize("num_m,pairs,seqlen", [(1, 1, 100), (4, 512, 512), (5, 6, 600), (8, 256, 1024),
                                                (43, 16, 5500), (12, 200, 1536), (7, 300, 777)])
def test_each_order_visits_every_tile_once(order, num_m, pairs, seqlen):
    seen = [t for w in walks(TileScheduler("persistent", True, causal_order=order), num_m, pairs, seqlen) for t in w]
    assert sorted(seen) == sorted((m, p) for m in range(num_m) for p in range(pairs))


def test_all_is_the_order_the_shipped_walk_takes():
    # "all" decodes through causal_lpt_order (no sections): the cubins of the shipped forms.
    sched = TileScheduler("persistent", True)
    for t in range(4 * 96):
        m, h, b = sched.decode(t, 4, 16, 6, 512, ROW, 0)
        assert (m, b * 16 + h) == causal_lpt_order(t, 4, 96, 512, ROW, 0)
    # ... and sectioned_order with one section is the same order.
    assert all(sectioned_order(t, 4, 96, 96) == causal_lpt_order(t, 4, 96, 512, ROW, 0) for t in range(384))


def test_section_size_rule():
    assert [low_bit(x) for x in (1, 4, 12, 264, 96)] == [1, 4, 4, 8, 32]
    # FA3 grid, hd128: 512 pairs x 512 keys, 256 x 1k, 128 x 2k, 64 x 4k -> 2C / min(lowbit(num_m), 8)
    for s, pairs, want in ((512, 512, 66), (1024, 256, 33), (2048, 128, 33), (4096, 64, 33), (8192, 32, 32)):
        assert section_pairs("sections", s // 128, pairs, s, ROW, SMS) == want
    # all K and V within SECTION_L2_BYTES: one section (L2 holds them in any order)
    fits = SECTION_L2_BYTES // (ROW * 2048)
    assert section_pairs("sections", 16, fits, 2048, ROW, SMS) == fits
    assert section_pairs("sections", 16, fits + 1, 2048, ROW, SMS) == 33
    # an odd number of m blocks: no power of two divides it, no section balances
    assert section_pairs("sections", 7, 512, 777, ROW, SMS) == 512
    assert section_pairs("pairs", 4, 512, 512, ROW, SMS) == 1 and section_pairs("all", 4, 512, 512, ROW, SMS) == 512


def sweep():
    for tm, tn in ((128, 128), (128, 80), (128, 96)):
        for s in (512, 640, 1024, 1536, 2048, 3000, 4096):
            for pairs in (16, 48, 64, 128, 200, 512):
                yield tm, tn, s, pairs


def test_sections_keep_the_all_pairs_balance():
    worst = {}
    for tm, tn, s, pairs in sweep():
        ratio = makespan("sections", tm, tn, s, pairs) / makespan("all", tm, tn, s, pairs)
        worst[(tm, tn)] = max(worst.get((tm, tn), 0.0), ratio)
    # Square tiles: a round pair's two levels sum to one cost exactly. Narrower key blocks round
    # their block counts up per level, so the sums differ by a block (hd256's 128 x 80: <= 5%).
    assert worst[(128, 128)] <= 1.01, worst
    assert max(worst.values()) <= 1.15, worst


def test_pairs_alone_can_lose_the_balance():
    # The FA3 grid's cells even out with one pair a section (132 % 4 == 0, 264 % 8 == 0) ...
    assert makespan("pairs", 128, 128, 512, 512) <= 1.04
    # ... but 16 pairs x 16 m blocks put a pair's whole cost range in every round: 1.5x.
    assert makespan("pairs", 128, 128, 2048, 16) > 1.4
    assert makespan("sections", 128, 128, 2048, 16) <= 1.04


def hbm_blocks(order: str, num_m, pairs, seqlen, l2_blocks):
    """K/V blocks read from HBM when every CTA visits its tiles' blocks one per time step,
    through an LRU cache of `l2_blocks` blocks."""
    ws = walks(TileScheduler("persistent", True, causal_order=order), num_m, pairs, seqlen)
    events = [(0, c, 0, 0) for c in range(len(ws))]
    heapq.heapify(events)
    lru, misses = OrderedDict(), 0
    while events:
        t, c, i, j = heapq.heappop(events)
        m, pair = ws[c][i]
        if (pair, j) in lru:
            lru.move_to_end((pair, j))
        else:
            misses += 1
            lru[(pair, j)] = True
            if len(lru) > l2_blocks:
                lru.popitem(last=False)
        if j < m:
            heapq.heappush(events, (t + 1, c, i, j + 1))
        elif i + 1 < len(ws[c]):
            heapq.heappush(events, (t + 1, c, i + 1, 0))
    return misses


def test_sections_read_k_and_v_once_where_all_pairs_read_them_again():
    # hd128 causal 512: 512 pairs x 4 blocks of 64 KiB (128 keys of K and V); 40 MiB of L2.
    unique = 4 * 512
    assert hbm_blocks("sections", 4, 512, 512, 40 * 16) == unique
    assert hbm_blocks("pairs", 4, 512, 512, 40 * 16) == unique
    assert hbm_blocks("all", 4, 512, 512, 40 * 16) > 2.3 * unique


def test_causal_order_is_refused_where_it_does_not_apply():
    base = dict(arch="sm_90a", dtype="bf16", head_dim=128)
    assert FwdConfig(**base, causal=True, scheduler="persistent", causal_order="sections").causal_order == "sections"
    assert FwdConfig(**base, causal=True, scheduler="persistent").causal_order in CAUSAL_ORDERS
    for over in (dict(causal=False, scheduler="persistent"), dict(causal=True, scheduler="lpt"),
                 dict(causal=True, scheduler="single", pack_gqa=True, tile_m=64),
                 dict(causal=True, scheduler="persistent", fast_divmod=True)):
        with pytest.raises(ValueError, match="causal_order orders the persistent causal walk"):
            FwdConfig(**base, **over, causal_order="pairs")
    with pytest.raises(ValueError, match="causal_order must be one of"):
        FwdConfig(**base, causal=True, scheduler="persistent", causal_order="lpt")
