// fp16 copies of K and V for `wgmma+predecode` (kv_to_half.cu): a pass over memory decodes the first kv heads
// before the attention kernel, and the attention grid decodes the rest ahead of the blocks that read them
// (kv_decode_ahead.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "params.h"

namespace sdpa {

// Who decodes which kv head. Heads below prefix_heads are decoded by the pass. A head at or above it is split into
// chunks of chunk_rows keys of K or of V (2 * ceil(Sk / chunk_rows) chunks), decoded by the attention blocks
// lookahead_blocks before the blocks that read that head: block L decodes a share (chunks_per_share chunks, fewer
// or none at the end) of the head of block L + lookahead_blocks and adds the chunks it decoded to
// decoded_chunks[head], which the readers wait on.
// The blocks of one kv head are blocks_per_head consecutive blocks of the grid.
struct KvDecodePlan {
  __half* k_halves;  // [B, Hkv, Sk, D], contiguous
  __half* v_halves;
  unsigned* decoded_chunks;  // [B * Hkv]; the pass zeroes the entries of the heads it leaves to the grid
  int heads;                 // B * Hkv
  int prefix_heads;
  int lookahead_blocks;
  int blocks_per_head;
  int chunks_per_head;
  int chunks_per_share;  // ceil(chunks_per_head / blocks_per_head)
};

// Bytes of the call's workspace the plan takes: both fp16 copies and the counters.
int64_t kv_decode_workspace_bytes(const AttentionParams& params);

// The plan for an attention grid of blocks_per_head blocks per kv head. In-grid decoding needs the blocks of a
// head in launch order (not causal: its grid runs the heaviest query tiles of every head first) and a lookahead of
// at least a head's blocks, so that every block a reader waits for started before it; `resident_blocks` (the
// blocks the GPU runs at once) is the lookahead that leaves each share a block's lifetime to land. When the grid
// is no longer than the lookahead the pass decodes every head.
KvDecodePlan plan_kv_decode(const AttentionParams& params, int blocks_per_head, int chunk_rows, int resident_blocks);

// Decodes the plan's prefix heads and zeroes the counters of the others; needs 16-byte aligned k and v rows.
// Launched as a programmatic dependent launch where params.overlap_launch allows it.
cudaError_t launch_kv_to_half(const AttentionParams& params, const KvDecodePlan& plan, cudaStream_t stream);

}  // namespace sdpa
