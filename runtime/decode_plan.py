"""The decode plan: split count and pack-GQA for a few query tokens against many keys.

Pure arithmetic on the problem's sizes and the SM count, with no imports of ours, so the
dispatcher (runtime/dispatch.py: its ``decode_splits`` value and the rule that routes
decode-shaped flash_attn_func calls to the split-KV forms), flash_attn_with_kvcache
(runtime/kvcache.py) and, as generated constants, the C++ bundle all read one copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Split heuristic constants (FA3's shape): splits only while the tiles fill under 80% of
# the SMs, each split keeps at least MIN_BLOCKS_PER_SPLIT key blocks, and the smallest
# count within 85% of the best wave efficiency wins.
FILL_FRACTION = 0.8
MIN_BLOCKS_PER_SPLIT = 4
MAX_SPLITS = 128
EFFICIENCY_SLACK = 0.85


def num_splits_heuristic(tiles: int, n_blocks: int, sm_count: int, max_splits: int = MAX_SPLITS) -> int:
    """How many splits of the key range: 1 when the ``tiles`` (query tiles x heads x batch)
    nearly fill the ``sm_count`` SMs or the ``n_blocks`` key blocks are few; else the fewest
    splits whose waves are within EFFICIENCY_SLACK of the best wave efficiency (a split
    count that does not shorten the longest split is never taken)."""
    if tiles <= 0 or n_blocks <= 0 or sm_count <= 0:
        return 1
    if tiles >= FILL_FRACTION * sm_count or n_blocks < 2 * MIN_BLOCKS_PER_SPLIT:
        return 1
    cap = max(1, min(max_splits, sm_count, n_blocks // MIN_BLOCKS_PER_SPLIT))

    def eligible(s):
        return s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))

    def efficiency(s):
        waves = tiles * s / sm_count
        return waves / math.ceil(waves)

    effs = {s: efficiency(s) for s in range(1, cap + 1) if eligible(s)}
    best = max(effs.values())
    return min(s for s, e in effs.items() if e >= EFFICIENCY_SLACK * best)


def pack_gqa_heuristic(seqlen_q: int, heads_q: int, heads_kv: int, tile_m: int) -> bool:
    """Pack the query heads of a KV head into the M tile when there is a group to pack and
    the unpacked tile would be mostly empty (decode: few query tokens)."""
    return heads_q > heads_kv and seqlen_q < tile_m


@dataclass(frozen=True)
class DecodePlan:
    pack_gqa: bool
    num_splits: int
    tiles: int  # CTAs of one split
    n_blocks: int  # key blocks of the longest sequence (an upper bound)


def plan_decode(batch: int, seqlen_q: int, heads_q: int, heads_kv: int, max_seqlen_k: int, sm_count: int,
                tile_m: int, tile_n: int, pack_gqa: bool | None = None, num_splits: int = 0) -> DecodePlan:
    """Pack-GQA and split count for one call; ``pack_gqa=None`` and ``num_splits=0`` mean auto."""
    group = heads_q // heads_kv
    pack = pack_gqa_heuristic(seqlen_q, heads_q, heads_kv, tile_m) if pack_gqa is None else bool(pack_gqa)
    rows = seqlen_q * group if pack else seqlen_q
    tiles = -(-rows // tile_m) * (heads_kv if pack else heads_q) * batch
    n_blocks = -(-max_seqlen_k // tile_n)
    splits = num_splits_heuristic(tiles, n_blocks, sm_count) if num_splits == 0 else int(num_splits)
    return DecodePlan(pack, splits, tiles, n_blocks)


# The tiles ``decode_splits`` plans with before a variant is chosen (the dispatcher's count for
# flash_attn_func's decode route, whatever form then runs): 64 x 128, the hd64 decode forms' and
# the hd128 paged split ones' (hd128's other decode forms are 64 x 64, hd256's 64 x 80: generator
# spec.DECODE_DEFAULT). flash_attn_with_kvcache's auto count plans from the chosen form's tiles.
DECODE_TILE_M, DECODE_TILE_N = 64, 128


def gqa_group(heads_q, heads_kv) -> int | None:
    """Query heads per KV head, or None when a count is missing or they do not divide."""
    if not heads_q or not heads_kv or heads_q % heads_kv:
        return None
    return heads_q // heads_kv


def decode_splits(batch, seqlen_q, heads_q, heads_kv, seqlen_k, sm_count) -> int | None:
    """The auto split count of a decode form for this problem, or None when a size is not
    given (or heads do not divide): the dispatcher's derived value ``decode_splits``."""
    sizes = (batch, seqlen_q, heads_q, heads_kv, seqlen_k, sm_count)
    if any(s is None for s in sizes) or not heads_kv or heads_q % heads_kv:
        return None
    return plan_decode(batch, seqlen_q, heads_q, heads_kv, seqlen_k, sm_count, DECODE_TILE_M, DECODE_TILE_N).num_splits
