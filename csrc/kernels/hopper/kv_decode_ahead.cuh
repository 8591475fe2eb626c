// K and V decoded to fp16 by the attention grid of `wgmma+predecode` itself, ahead of the blocks that read them
// (KvDecodePlan, kv_to_half.h): the producer warps that the TMA copies leave idle decode a share of the kv head of
// the block one lookahead later, and the copier of a reading block waits until its head is complete.
// Why: a pass over every head costs 28.8 us at 4x16x2048x128 (100 MB at 3.5 TB/s) against 207 us of attention,
// while the decode itself is a few instructions per 16 codes; run beside the attention of earlier heads it needs
// only spare bandwidth and the producers' idle issue slots. Measured there (H200, profiler): the pass over the
// first 9 of 64 kv heads 5.9 us, the attention kernel 210.1 us (207.2 with every head decoded beforehand); graph
// time 212.9 us against cuDNN's 215.8 in the same run (234.5 with the whole pass in an earlier one).
// Deadlock: a reader waits only for the blocks lookahead_blocks before each block of its head, and the blocks of a
// head lie within fewer than lookahead_blocks consecutive blocks (KvDecodePlan), so those started before the
// reader, and they never wait themselves. (Blocks of one grid start in index order: CUB's decoupled look-back
// relies on the same.)
#pragma once

#include "../common/tile_rows.cuh"
#include "hopper.cuh"
#include "kv_to_half.h"

namespace sdpa {

// One thread: returns once kv head `head` (batch * Hkv + kv head) is decoded, ready for TMA copies.
__device__ __forceinline__ void wait_for_decoded_head(const KvDecodePlan& plan, int head) {
  if (head < plan.prefix_heads) return;  // the pass, which the kernel waited for, decoded it
  while (load_acquire_gpu(plan.decoded_chunks + head) < static_cast<unsigned>(plan.chunks_per_head)) {
    __nanosleep(128);
  }
  fence_proxy_async_global();
}

// This block's share of the decode ahead, kept in shared memory: the producers have 24 registers, and ptxas
// spilled the values it hoisted out of the loop below when they stayed in registers.
struct DecodeAheadJob {
  unsigned head, batch, head_kv;  // head = batch * Hkv + head_kv, the kv head decoded
  unsigned first, count;          // its chunks first ... first + count - 1
};

// kThreads threads (tid 0 ... kThreads - 1, named barrier kBarrier among them) decode this block's share of the
// head of block blockIdx.x + lookahead_blocks (the block's place s among that head's blocks: chunks
// s * chunks_per_share ... on): chunk c is key tile c / 2 of K (c even) or V, kRows x kD codes that TMA copies
// (k_codes, v_codes: boxes of kRows plain rows) into one of two buffers of shared memory, each with its mbarrier,
// while the threads convert the other into the head's fp16 copy with plain 16-byte stores.
template <int kD, int kRows, int kThreads, int kBarrier>
__device__ __forceinline__ void decode_ahead(const KvDecodePlan& plan, const CUtensorMap& k_codes,
                                             const CUtensorMap& v_codes, int heads_kv, int seqlen_k,
                                             uint8_t* buffers, uint64_t* loaded, DecodeAheadJob* job, int tid) {
  // Unsigned 32-bit arithmetic (signed or 64-bit divisions spilled too); plan_kv_decode keeps the grid's blocks
  // times chunks_per_share below 2^31.
  if (blockIdx.x >= gridDim.x - min(gridDim.x, static_cast<unsigned>(plan.lookahead_blocks))) return;
  const BlockShare target = block_share(plan, blockIdx.x + plan.lookahead_blocks);
  const unsigned head = target.head, first = target.place * plan.chunks_per_share;
  if (head < static_cast<unsigned>(plan.prefix_heads) || first >= static_cast<unsigned>(plan.chunks_per_head)) return;
  const unsigned count = min(static_cast<unsigned>(plan.chunks_per_share), plan.chunks_per_head - first);
  constexpr int kBufferBytes = kRows * kD, kPiecesPerRow = kD / 8;
  const bool elected = tid == 0;
  auto copy_codes = [&](unsigned i) {
    const unsigned chunk = job->first + i, buffer = i % 2;
    mbarrier_arrive_expect_bytes(loaded + buffer, kBufferBytes);
    tma_load_4d(buffers + buffer * kBufferBytes, chunk % 2 == 0 ? k_codes : v_codes, 0, chunk / 2 * kRows,
                job->head_kv, job->batch, loaded + buffer);
  };
  if (elected) {
    *job = {head, target.batch, head - target.batch * heads_kv, first, count};
    copy_codes(0);
    if (count > 1) copy_codes(1);
  }
  barrier_sync(kBarrier, kThreads);  // the job is in shared memory
  for (unsigned i = 0; i < count; ++i) {
    const unsigned chunk = job->first + i, row0 = chunk / 2 * kRows;
    mbarrier_wait(loaded + i % 2, i / 2 % 2);
    // The buffer holds rows row0 ... row0 + kRows - 1 of D codes each, in order: 8-code piece j of the buffer is
    // piece j of the copy from row0 on, one 8-byte load and one 16-byte store, so that a warp's stores fill 512
    // contiguous bytes (16-code pieces, stored as two 16-byte halves 32 bytes apart: the attention kernel took
    // 372.6-374.6k against 371.2-373.8k SM cycles at 4x16x2048x128, 1271-1275k against 1270-1271k at
    // 1x16x8192x128; H200, base clock, same profiler run). A fixed number of pieces per thread, unrolled: every
    // address is one of two bases plus a constant.
    const uint2* codes = reinterpret_cast<const uint2*>(buffers + i % 2 * kBufferBytes) + tid;
    uint4* halves = reinterpret_cast<uint4*>((chunk % 2 == 0 ? plan.k_halves : plan.v_halves) +
                                             (static_cast<uint64_t>(job->head) * seqlen_k + row0) * kD) +
                    tid;
    const int pieces = min(kRows, seqlen_k - static_cast<int>(row0)) * kPiecesPerRow - tid;
#pragma unroll
    for (int j = 0; j < (kRows * kPiecesPerRow + kThreads - 1) / kThreads; ++j) {
      if (j * kThreads < pieces) {
        const uint2 c = codes[j * kThreads];
        halves[j * kThreads] = decode_8(c.x, c.y);
      }
    }
    fence_proxy_async_global();  // these stores before the release below, for the readers' TMA copies
    barrier_sync(kBarrier, kThreads);  // every thread is done with the buffer (and its stores are in order)
    if (elected && i + 2 < count) copy_codes(i + 2);
  }
  if (elected) add_release_gpu(plan.decoded_chunks + job->head, count);
}

}  // namespace sdpa
