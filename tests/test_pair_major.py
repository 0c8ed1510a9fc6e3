"""The pair-major causal walk (FwdConfig.pair_major, schedule.TileScheduler.pair_major), on the
CPU: it visits every tile once, its fast decode agrees with the plain one, a round of the stride
touches only ~ctas / num_m (head, batch) pairs where the all-pairs order touches one a tile, and with the zigzag rounds the short cells' loads stay within one tile of the even split.
A small LRU model of L2 shows what the order is for: at 512 keys, hd128, the all-pairs order
reads K and V from HBM ~2.5 times over, the pair-major one once."""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import TileScheduler, decode_divisors, decode_fast

SMS = 132


def walks(sched: TileScheduler, num_m, heads, batch, ctas=SMS):
    """Each CTA's (m_block, head, batch) tiles in the order the kernel's loop takes them."""
    num_tiles = num_m * heads * batch
    out = []
    for cta in range(min(ctas, num_tiles)):
        k, tile, walk = 0, sched.first(0, cta, min(ctas, num_tiles)), []
        while tile < num_tiles:
            walk.append(sched.decode(tile, num_m, heads, batch, 1024, 512, 0))
            k += 1
            tile = sched.next(k, tile, cta, min(ctas, num_tiles))
        out.append(walk)
    return out


def blocks(m_block, tile, s):
    """Key blocks a causal tile of a square problem visits."""
    return min(m_block + 1, math.ceil(s / tile))


@pytest.mark.parametrize("kind", ["persistent", "lpt"])
@pytest.mark.parametrize("num_m,heads,batch", [(1, 1, 1), (4, 16, 32), (5, 3, 2), (43, 8, 2), (128, 16, 1)])
def test_pair_major_visits_every_tile_once_longest_first_per_pair(kind, num_m, heads, batch):
    sched = TileScheduler(kind, True, pair_major=True)
    seen = [t for w in walks(sched, num_m, heads, batch) for t in w]
    assert sorted(seen) == sorted((m, h, b) for m in range(num_m) for h in range(heads) for b in range(batch))
    # linear tile t -> pair t // num_m, m from the last: a pair's blocks are consecutive tiles
    order = [sched.decode(t, num_m, heads, batch, 1024, 512, 0) for t in range(num_m * heads * batch)]
    assert [m for m, _, _ in order[:num_m]] == list(range(num_m - 1, -1, -1))
    assert {(h, b) for _, h, b in order[:num_m]} == {(0, 0)}


@pytest.mark.parametrize("num_m,heads,batches,heads_kv", [(1, 1, 1, 1), (4, 16, 32, 4), (22, 8, 2, 2), (128, 32, 1, 8)])
def test_pair_major_fast_decode_agrees(num_m, heads, batches, heads_kv):
    sched = TileScheduler("persistent", True, pair_major=True)
    divs = decode_divisors(sched, num_m, heads, batches, heads_kv)
    for tile in range(num_m * heads * batches):
        m_block, head, batch = sched.decode(tile, num_m, heads, batches, 8192, 512, 0)
        assert decode_fast(sched, tile, num_m, divs) == (m_block, head, batch, head // (heads // heads_kv))


def test_a_round_touches_few_pairs():
    # hd128 causal 512 keys on the FA3 grid: 4 m blocks, 512 (head, batch) pairs.
    num_m, heads, batch = 4, 16, 32
    # all pairs: every tile of a round is another pair's, and the next round's as well
    for pair_major, most in ((True, math.ceil(SMS / num_m)), (False, SMS)):
        sched = TileScheduler("persistent", True, pair_major=pair_major)
        first_round = {sched.decode(t, num_m, heads, batch, 512, 512, 0)[1:] for t in range(SMS)}
        assert len(first_round) == most


def fa3_short_cells():
    """(tile_m, tile_n, batch, heads, seqlen) of the FA3 grid's causal cells up to 2k keys."""
    for hd, tiles in ((64, (128, 128)), (128, (128, 128)), (256, (128, 80))):
        for s in (512, 1024, 2048):
            yield (*tiles, 16384 // s, 2048 // hd, s)


@pytest.mark.parametrize("tm,tn,batch,heads,s", list(fa3_short_cells()))
def test_pair_major_balances_the_short_cells(tm, tn, batch, heads, s):
    num_m = math.ceil(s / tm)
    sched = TileScheduler("persistent", True, pair_major=True)

    def cost(m):  # key blocks of a causal tile (square problem)
        return min(math.ceil((m + 1) * tm / tn), math.ceil(s / tn))

    loads = [sum(cost(m) for m, _, _ in w) for w in walks(sched, num_m, heads, batch)]
    ideal = sum(cost(m) for m in range(num_m)) * heads * batch / len(loads)
    assert max(loads) <= ideal + cost(num_m - 1), (max(loads), ideal)
    # Without the zigzag rounds CTA c always took m = num_m - 1 - c % num_m (132 % 4 == 0):
    # the first causal persistent build's 16% loss (ab-scheduler.md).
    if num_m == 4:
        assert {w[0][0] for w in walks(sched, num_m, heads, batch)[::4]} == {3}
        assert {w[1][0] for w in walks(sched, num_m, heads, batch)[::4]} == {0}


def hbm_kv_blocks(sched: TileScheduler, num_m, pairs, l2_blocks):
    """K/V blocks read from HBM when each CTA visits its tiles' blocks one per time step (all
    CTAs in lock step), through an LRU cache of `l2_blocks` blocks."""
    ws = walks(sched, num_m, pairs, 1)
    events = [(0, c, 0, 0) for c in range(len(ws))]
    heapq.heapify(events)
    lru, misses = OrderedDict(), 0
    while events:
        t, c, i, j = heapq.heappop(events)
        m, hb, _ = ws[c][i]
        key = (hb, j)
        if key in lru:
            lru.move_to_end(key)
        else:
            misses += 1
            lru[key] = True
            if len(lru) > l2_blocks:
                lru.popitem(last=False)
        if j + 1 <= m:
            heapq.heappush(events, (t + 1, c, i, j + 1))
        elif i + 1 < len(ws[c]):
            heapq.heappush(events, (t + 1, c, i + 1, 0))
    return misses


def test_pair_major_reads_k_and_v_once_where_all_pairs_read_them_again():
    # hd128 causal 512: 512 pairs x 4 blocks of 64 KiB (128 keys of K and V), 40 MiB of L2 for them.
    num_m, pairs, l2_blocks = 4, 512, 40 * 16
    unique = num_m * pairs
    pair = hbm_kv_blocks(TileScheduler("persistent", True, pair_major=True), num_m, pairs, l2_blocks)
    every = hbm_kv_blocks(TileScheduler("persistent", True), num_m, pairs, l2_blocks)
    assert pair == unique
    assert every > 2.3 * unique


def test_pair_major_is_refused_where_it_does_not_apply():
    base = dict(arch="sm_90a", dtype="bf16", head_dim=128)
    assert FwdConfig(**base, causal=True, scheduler="persistent", pair_major=True).pair_major
    assert FwdConfig(**base, causal=True, scheduler="lpt", pair_major=True).pair_major
    for over in (dict(causal=False, scheduler="persistent"), dict(causal=True, scheduler="single"),
                 dict(causal=True, scheduler="single", pack_gqa=True, tile_m=64)):
        with pytest.raises(ValueError, match="pair_major orders the causal"):
            FwdConfig(**base, **over, pair_major=True)
