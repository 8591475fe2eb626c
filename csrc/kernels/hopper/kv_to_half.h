// fp16 copies of K and V for `wgmma+predecode` (kv_to_half.cu): a pass over memory decodes the first kv heads
// before the attention kernel, and the attention grid decodes the rest ahead of the blocks that read them
// (kv_decode_ahead.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/params.h"
#include "grid_order.h"

namespace sdpa {

// Who decodes which kv head. Heads below prefix_heads are decoded by the pass. A head at or above it is split into
// chunks of chunk_rows keys of K or of V (2 * ceil(Sk / chunk_rows) chunks), decoded by the attention blocks
// lookahead_blocks before the blocks that read that head: block L decodes a share (chunks_per_share chunks, fewer
// or none at the end) of the head of block L + lookahead_blocks and adds the chunks it decoded to
// decoded_chunks[head], which the readers wait on.
// The grid runs the kv heads in groups (`order`, whose groups hold the query heads of whole kv heads), each
// group's blocks one after the other: one kv head per group, its blocks in a row, when not causal; causal, as many
// kv heads as the lookahead holds go through their query tiles together, heaviest first (head_coords_heavy_first).
struct KvDecodePlan {
  __half* k_halves;  // [B, Hkv, Sk, D], contiguous
  __half* v_halves;
  unsigned* decoded_chunks;  // [B * Hkv]; the pass zeroes the entries of the heads it leaves to the grid
  int heads;                 // B * Hkv
  int prefix_heads;
  int lookahead_blocks;
  int chunks_per_head;
  int chunks_per_share;  // ceil(chunks_per_head / the blocks per kv head)
  GridOrder order;
};

// The kv head that block `block` of the attention grid reads (batch * Hkv + kv head) and its batch, and the
// block's place among that head's blocks (0 ... its blocks - 1): the grouped order (grouped_block), a query
// tile's rank and its query head's place among those of its kv head. Causal, that is the order of
// head_coords_heavy_first. Not causal, a group is one kv head: the place comes out as the block's offset from the
// head's first block, whatever the order of its query heads' tiles.
struct BlockShare {
  unsigned head, batch, place;
};
__host__ __device__ inline BlockShare block_share(const KvDecodePlan& plan, unsigned block) {
  const FastDivisor& per_head = plan.order.q_per_kv;
  const GroupedBlock b = grouped_block(block, plan.order);
  const unsigned head = per_head.quotient(b.head), batch = plan.order.heads_q.quotient(b.head);
  return {head, batch, b.rank * per_head.divisor + b.head - head * per_head.divisor};
}

// Bytes of the call's workspace the plan takes: both fp16 copies and the counters.
int64_t kv_decode_workspace_bytes(const AttentionParams& params);

// The plan for an attention grid of blocks_per_head blocks per kv head. In-grid decoding needs every block of a
// head to start after the blocks that decode it, which come lookahead_blocks before the head's blocks: the blocks
// of a head must lie within fewer than lookahead_blocks consecutive blocks, which groups of at most lookahead_blocks
// blocks ensure. `resident_blocks` (the blocks the GPU runs at once) is the lookahead that leaves each
// share a block's lifetime to land. When the grid is no longer than the lookahead the pass decodes every head.
KvDecodePlan plan_kv_decode(const AttentionParams& params, int blocks_per_head, int chunk_rows, int resident_blocks);

// Decodes the plan's prefix heads and zeroes the counters of the others; needs 16-byte aligned k and v rows.
// Launched as a programmatic dependent launch where params.overlap_launch allows it.
cudaError_t launch_kv_to_half(const AttentionParams& params, const KvDecodePlan& plan, cudaStream_t stream);

}  // namespace sdpa
