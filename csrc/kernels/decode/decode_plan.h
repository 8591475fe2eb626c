// How the decode kernel (attention_decode.cuh) lays a call over the GPU, planned on the host from the shapes
// alone (no device data, so a captured CUDA graph replays the same plan).
//
// The query heads that share a kv head are packed into the rows of one tile: packed row r of kv head h is query
// head h * group + r / Sq, query r % Sq, so each K/V code is read once per kv head, not once per query head. A
// block takes kBlockM packed rows (16, 32 or 64: row_warps warps of 16) and a contiguous range of keys; the key
// range of a head is split across `splits` blocks (flash-decoding) so that even B = 1 fills every SM, and a second
// kernel merges the splits' partial rows through their lse. A (row tile, split) pair is a work item; the grid is
// one-dimensional, item i being split i % splits of row tile i / splits.
#pragma once

#include <cstdint>

#include "../common/params.h"

namespace sdpa {

struct DecodePlan {
  int row_warps;       // 16-row warps per block along the packed rows: 1, 2 or 4
  int row_tiles;       // blocks along the packed rows of a kv head
  int splits;          // blocks along the keys of a kv head
  int keys_per_split;  // a multiple of the keys a block loads per round
  int64_t rows;        // B * Hq * Sq: the rows of the partial results
  int items;           // row tiles * splits, over the batch's kv heads
  int slots;           // blocks the GPU holds at once: SMs * blocks per SM (a persistent grid's size at most)
};

// Packed rows of one kv head, and the warps along them (host only: it asks the device): as few as hold them (16 rows
// a warp, 4 warps at most, 2 at D = 256, where a block's Q codes must fit the ring slot of two 4 KB tiles they are
// staged in; more rows take more row tiles), but on sm_90 16-row blocks for up to 64 rows where the call's K and V
// codes fit L2 (attention_decode.cu).
SDPA_HOST_DEVICE int decode_packed_rows(const AttentionParams& p) { return p.heads_q / p.heads_kv * p.seqlen_q; }
int decode_row_warps(const AttentionParams& p);

// Bytes of one K or V code tile of the decode kernel, at every head dim: its keys per tile are this over D.
constexpr int kDecodeTileBytes = 4096;

// Blocks of the decode kernel at `head_dim` with `row_warps` warps along the rows (64-row blocks by wgmma when
// `wgmma`) resident per SM on the current device, 0 when the runtime cannot say.
int decode_blocks_per_sm(int head_dim, int row_warps, bool wgmma);

DecodePlan plan_decode(const AttentionParams& p, int sms, int blocks_per_sm);

// The workspace of a plan with splits > 1: partial O [splits][rows][D] and lse [splits][rows], float32.
int64_t decode_workspace_bytes(const AttentionParams& p);
int64_t decode_wgmma_workspace_bytes(const AttentionParams& p);

}  // namespace sdpa
