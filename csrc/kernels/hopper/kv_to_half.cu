// Decodes the K and V codes of a call into contiguous fp16 copies (exact: every E4M3 value is an fp16 value), so
// that `wgmma+predecode` reads fp16 tiles by TMA instead of decoding every tile again in every block. Each query
// block of a head decoded all of the head's K and V before: 16 times the work at 2048 query rows per head.
// The pass decodes the plan's first heads only; the attention grid decodes the others (kv_decode_ahead.cuh).
#include <algorithm>

#include "../common/attention_common.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"
#include "kv_to_half.h"

namespace sdpa {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerHead = 65535;  // gridDim.y

// Block (head, y, tensor): tensor 0 is K, 1 is V; `head` runs over B * Hkv. A piece is 8 codes of a row: one 8-byte
// load and one 16-byte store, so that a warp's stores fill 512 contiguous bytes. Each thread loads
// kPiecesPerThread pieces, kThreads apart, before it stores any; block y takes the groups of pieces y,
// y + gridDim.y, ... Block (0, 0, 0) also zeroes the counters of the heads left to the grid.
// H200, SM cycles at base clock (profiler), pass over the first 9 kv heads at 4x16x2048x128: 12.0-12.8k with
// 16-code pieces (two 16-byte stores 32 bytes apart per thread, five runs), 9.6-10.2k with 8-code pieces two per
// thread (six runs), 10.5-10.8k one per thread, 10.1-10.3k four per thread; 1x16x8192x128 14.7-15.2k against
// 10.9-11.3k. The pass is latency-bound either way (14% of DRAM bandwidth; its warps wait on the loads).
constexpr int kPiecesPerThread = 2;
__global__ void __launch_bounds__(kThreads) kv_to_half_kernel(const AttentionParams p, const KvDecodePlan plan) {
  allow_next_grid_launch();
  // Before any access: the kernel before may still be writing the codes, or reading the copies of the previous
  // call, whose workspace the allocator may have handed to this one.
  wait_for_previous_grids();
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    for (int head = plan.prefix_heads + threadIdx.x; head < plan.heads; head += kThreads) {
      plan.decoded_chunks[head] = 0;
    }
  }
  const bool is_v = blockIdx.z == 1;
  const int batch = blockIdx.x / p.heads_kv, head = blockIdx.x % p.heads_kv;
  const uint8_t* src = (is_v ? p.v : p.k) + batch * (is_v ? p.v_batch_stride : p.k_batch_stride) +
                       head * (is_v ? p.v_head_stride : p.k_head_stride);
  const int64_t row_stride = is_v ? p.v_row_stride : p.k_row_stride;
  const int64_t head_elements = static_cast<int64_t>(p.seqlen_k) * p.head_dim;
  uint4* dst = reinterpret_cast<uint4*>((is_v ? plan.v_halves : plan.k_halves) + blockIdx.x * head_elements);
  const int pieces_per_row = p.head_dim / 8, pieces = p.seqlen_k * pieces_per_row;
  constexpr int kGroup = kPiecesPerThread * kThreads;
  for (int first = blockIdx.y * kGroup + threadIdx.x; first < pieces; first += gridDim.y * kGroup) {
    uint2 codes[kPiecesPerThread];
#pragma unroll
    for (int i = 0; i < kPiecesPerThread; ++i) {
      const int piece = first + i * kThreads;
      if (piece < pieces) {
        const int row = piece / pieces_per_row, col = piece % pieces_per_row * 8;
        codes[i] = *reinterpret_cast<const uint2*>(src + row * row_stride + col);
      }
    }
#pragma unroll
    for (int i = 0; i < kPiecesPerThread; ++i) {
      if (first + i * kThreads < pieces) dst[first + i * kThreads] = decode_8(codes[i].x, codes[i].y);
    }
  }
}

// The workspace of a call: the fp16 copy of K, then V's, then a counter per kv head.
struct KvWorkspace {
  int64_t heads, copy_elements;
  explicit KvWorkspace(const AttentionParams& p)
      : heads(static_cast<int64_t>(p.batch) * p.heads_kv), copy_elements(heads * p.seqlen_k * p.head_dim) {}
  int64_t bytes() const { return 2 * copy_elements * static_cast<int64_t>(sizeof(__half)) + heads * sizeof(unsigned); }
  __half* k_halves(void* base) const { return static_cast<__half*>(base); }
  __half* v_halves(void* base) const { return k_halves(base) + copy_elements; }
  unsigned* counters(void* base) const { return reinterpret_cast<unsigned*>(v_halves(base) + copy_elements); }
};

}  // namespace

int64_t kv_decode_workspace_bytes(const AttentionParams& p) { return KvWorkspace(p).bytes(); }

KvDecodePlan plan_kv_decode(const AttentionParams& p, int blocks_per_head, int chunk_rows, int resident_blocks) {
  const KvWorkspace workspace(p);
  KvDecodePlan plan;
  plan.heads = static_cast<int>(workspace.heads);
  plan.k_halves = workspace.k_halves(p.workspace);
  plan.v_halves = workspace.v_halves(p.workspace);
  plan.decoded_chunks = workspace.counters(p.workspace);
  plan.chunks_per_head = 2 * ((p.seqlen_k + chunk_rows - 1) / chunk_rows);
  plan.lookahead_blocks = std::max(resident_blocks, blocks_per_head);
  plan.chunks_per_share = (plan.chunks_per_head + blocks_per_head - 1) / blocks_per_head;
  // Causal, as many heads per group as the lookahead holds: the heaviest tiles of only those heads come first, and
  // the last wave still holds the cheapest tiles (of the last group).
  const int group_heads = p.is_causal ? std::min(plan.heads, plan.lookahead_blocks / blocks_per_head) : 1;
  const int query_heads_per_head = p.heads_q / p.heads_kv;
  plan.order = grid_order(p, blocks_per_head / query_heads_per_head, group_heads * query_heads_per_head);
  // Unsigned 32-bit block and chunk arithmetic in the grid (block_share, decode_ahead).
  const int64_t blocks = static_cast<int64_t>(plan.heads) * blocks_per_head;
  const bool in_grid = blocks > plan.lookahead_blocks && blocks * plan.chunks_per_share < (int64_t{1} << 31);
  // The pass decodes the heads that the blocks before the lookahead read (no blocks come before them to decode
  // those): every head of the groups they reach.
  plan.prefix_heads = plan.heads;
  if (in_grid) {
    const int last_group = static_cast<int>(block_share(plan, plan.lookahead_blocks - 1).head) / group_heads;
    plan.prefix_heads = std::min(plan.heads, (last_group + 1) * group_heads);
  }
  return plan;
}

cudaError_t launch_kv_to_half(const AttentionParams& p, const KvDecodePlan& plan, cudaStream_t stream) {
  const int groups = (p.seqlen_k * (p.head_dim / 8) + kPiecesPerThread * kThreads - 1) / (kPiecesPerThread * kThreads);
  const int blocks_per_head = std::min(groups, kMaxBlocksPerHead);
  const dim3 grid(static_cast<unsigned>(plan.prefix_heads), static_cast<unsigned>(blocks_per_head), 2);
  return launch_overlapping(p.overlap_launch, kv_to_half_kernel, grid, kThreads, 0, stream, p, plan);
}

}  // namespace sdpa
