// The decode plan (runtime/decode_plan.py): how many splits of the key range, and whether to
// pack the query heads of a KV head into the M tile, for few query tokens against many keys.
// The arithmetic is ported line for line; its constants come from the bundle
// (Bundle::decode_plan, generated), and tests/test_cpp_kvcache.py checks both languages agree
// over a grid of problems.
#pragma once

#include <cmath>
#include <cstdint>

#include "cubinforge/contract.h"

namespace cubinforge {

struct DecodePlan {
  bool pack_gqa;
  int num_splits;
  int64_t tiles;     // CTAs of one split
  int64_t n_blocks;  // key blocks of the longest sequence
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int num_splits_heuristic(int64_t tiles, int64_t n_blocks, int64_t sm_count, const DecodePlanConstants& k) {
  if (tiles <= 0 || n_blocks <= 0 || sm_count <= 0) return 1;
  if (static_cast<double>(tiles) >= k.fill_fraction * static_cast<double>(sm_count) ||
      n_blocks < 2 * k.min_blocks_per_split)
    return 1;
  int64_t cap = k.max_splits;
  if (sm_count < cap) cap = sm_count;
  if (n_blocks / k.min_blocks_per_split < cap) cap = n_blocks / k.min_blocks_per_split;
  if (cap < 1) cap = 1;
  auto eligible = [&](int64_t s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); };
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(tiles * s) / static_cast<double>(sm_count);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int64_t s = 1; s <= cap; ++s)
    if (eligible(s) && efficiency(s) > best) best = efficiency(s);
  for (int64_t s = 1; s <= cap; ++s)
    if (eligible(s) && efficiency(s) >= k.efficiency_slack * best) return static_cast<int>(s);
  return 1;
}

inline bool pack_gqa_heuristic(int64_t seqlen_q, int64_t heads_q, int64_t heads_kv, int64_t tile_m) {
  return heads_q > heads_kv && seqlen_q < tile_m;
}

// pack_gqa: -1 auto, 0 / 1 as given; num_splits: 0 auto.
inline DecodePlan plan_decode(int64_t batch, int64_t seqlen_q, int64_t heads_q, int64_t heads_kv, int64_t max_seqlen_k,
                              int64_t sm_count, int64_t tile_m, int64_t tile_n, const DecodePlanConstants& k,
                              int pack_gqa = -1, int num_splits = 0) {
  const int64_t group = heads_q / heads_kv;
  const bool pack = pack_gqa < 0 ? pack_gqa_heuristic(seqlen_q, heads_q, heads_kv, tile_m) : pack_gqa != 0;
  const int64_t rows = pack ? seqlen_q * group : seqlen_q;
  const int64_t tiles = ceil_div(rows, tile_m) * (pack ? heads_kv : heads_q) * batch;
  const int64_t n_blocks = ceil_div(max_seqlen_k, tile_n);
  const int splits = num_splits == 0 ? num_splits_heuristic(tiles, n_blocks, sm_count, k) : num_splits;
  return {pack, splits, tiles, n_blocks};
}

// The dispatcher's derived value `decode_splits` (-1 when a size is missing or heads do not divide).
inline int64_t decode_splits(int64_t batch, int64_t seqlen_q, int64_t heads_q, int64_t heads_kv, int64_t seqlen_k,
                             int64_t sm_count, const DecodePlanConstants& k) {
  if (batch < 0 || seqlen_q < 0 || heads_q < 0 || heads_kv <= 0 || seqlen_k < 0 || sm_count < 0 ||
      heads_q % heads_kv)
    return -1;
  return plan_decode(batch, seqlen_q, heads_q, heads_kv, seqlen_k, sm_count, k.tile_m, k.tile_n, k).num_splits;
}

// The dispatcher's derived value `gqa_group` (decode_plan.gqa_group): query heads per KV
// head, -1 when a count is missing or they do not divide.
inline int64_t gqa_group(int64_t heads_q, int64_t heads_kv) {
  if (heads_q <= 0 || heads_kv <= 0 || heads_q % heads_kv) return -1;
  return heads_q / heads_kv;
}

}  // namespace cubinforge
