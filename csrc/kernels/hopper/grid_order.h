// The Hopper grids' order of blocks over (head, query tile), with every division by a launch-time constant done by
// a multiply and a shift (FastDivisor). Why: every warp of a `wgmma` block derived the block's coordinates (and
// predecoded, those of the block it decodes ahead for) through a dozen integer divisions of ~30 instructions each,
// 395 instructions before its first barrier (111 now); ncu put 2.2% of the warp samples there. SM cycles at base
// clock (H200, same profiler run, two calls each), before / after: causal 4x16x2048x128 232.8k / 230.4k,
// 4x16x2048x64 (`wgmma_m192`) 267.2k / 263.0k; not causal at 4x16x2048x128 the same (368.9k / 369.7k).
#pragma once

#include <cstdint>

#include "../common/attention_common.cuh"
#include "../common/params.h"

namespace sdpa {

// n / divisor for n < 2^31 as (n * multiplier) >> shift, with shift = 31 + ceil(log2 divisor) and multiplier =
// ceil(2^shift / divisor) < 2^32. Exact: multiplier * divisor exceeds 2^shift by e < divisor <= 2^(shift - 31), so
// n / divisor is off by n e / (divisor 2^shift) < 1 / divisor, too little to reach the next integer.
struct FastDivisor {
  unsigned divisor, multiplier, shift;

  __host__ __device__ unsigned quotient(unsigned n) const {
    return static_cast<unsigned>(static_cast<uint64_t>(n) * multiplier >> shift);
  }
};

// For divisor >= 1.
inline FastDivisor fast_divisor(unsigned divisor) {
  unsigned log2_ceil = 0;
  while ((uint64_t{1} << log2_ceil) < divisor) ++log2_ceil;
  const unsigned shift = 31 + log2_ceil;
  const uint64_t multiplier = ((uint64_t{1} << shift) + divisor - 1) / divisor;
  return {divisor, static_cast<unsigned>(multiplier), shift};
}

// A grid of `heads` (batch, query head)s of tiles.divisor query tiles each. The blocks go in groups of
// group_row.divisor heads, one group's blocks after the other's, and within a group tile by tile: for each tile one
// block per head of the group. The last group may hold fewer heads (last_group_row). Causal `wgmma` grids run in
// this order, heaviest tile first (head_coords_heavy_first); the decode ahead of `wgmma+predecode` maps blocks onto
// kv heads through it (block_share, kv_to_half.h). Grids that are not causal run head by head instead
// (head_coords_in_order).
struct GridOrder {
  FastDivisor tiles;
  FastDivisor group_blocks;    // group_row.divisor * tiles.divisor
  FastDivisor group_row;       // heads per group
  FastDivisor last_group_row;  // heads in the last group
  FastDivisor heads_q;         // query heads per batch
  FastDivisor q_per_kv;        // query heads per kv head
  unsigned last_group;
};

// The order of `tiles` query tiles per head in groups of group_heads (batch, query head)s, a multiple of Hq / Hkv.
inline GridOrder grid_order(const AttentionParams& p, int tiles, int group_heads) {
  const unsigned heads = static_cast<unsigned>(p.batch) * p.heads_q, group = static_cast<unsigned>(group_heads);
  const unsigned last_group = (heads - 1) / group;
  GridOrder order;
  order.tiles = fast_divisor(tiles);
  order.group_blocks = fast_divisor(group * tiles);
  order.group_row = fast_divisor(group);
  order.last_group_row = fast_divisor(heads - last_group * group);
  order.heads_q = fast_divisor(p.heads_q);
  order.q_per_kv = fast_divisor(p.heads_q / p.heads_kv);
  order.last_group = last_group;
  return order;
}

// Where block `block` falls in the grouped order: its head (batch * Hq + query head) and its rank among its head's
// blocks.
struct GroupedBlock {
  unsigned head, rank;
};
__host__ __device__ inline GroupedBlock grouped_block(unsigned block, const GridOrder& order) {
  const unsigned group = order.group_blocks.quotient(block), local = block - group * order.group_blocks.divisor;
  const FastDivisor& row = group == order.last_group ? order.last_group_row : order.group_row;
  const unsigned rank = row.quotient(local);
  return {group * order.group_row.divisor + local - rank * row.divisor, rank};
}

// The coordinates of head `head` (batch * Hq + query head) and query tile `tile`.
__device__ __forceinline__ HeadCoords coords_of(const GridOrder& order, unsigned head, unsigned tile) {
  const unsigned batch = order.heads_q.quotient(head), head_q = head - batch * order.heads_q.divisor;
  return {static_cast<int>(batch), static_cast<int>(head_q), static_cast<int>(order.q_per_kv.quotient(head_q)),
          static_cast<int>(tile)};
}

// Block `block` of a grid that runs head by head, each head's tiles in a row.
__device__ __forceinline__ HeadCoords head_coords_in_order(const GridOrder& order, unsigned block) {
  const unsigned head = order.tiles.quotient(block);
  return coords_of(order, head, block - head * order.tiles.divisor);
}

// Block `block` of a causal grid ordered heaviest first: in the grouped order, from the last query tile (which sees
// every key) to the first, so that the last wave holds the cheapest blocks instead of leaving a few long ones
// running alone.
__device__ __forceinline__ HeadCoords head_coords_heavy_first(const GridOrder& order, unsigned block) {
  const GroupedBlock b = grouped_block(block, order);
  return coords_of(order, b.head, order.tiles.divisor - 1 - b.rank);
}

}  // namespace sdpa
