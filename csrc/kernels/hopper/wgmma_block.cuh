// What the warpgroups of a Hopper block share: the TMA descriptors (WgmmaMaps), the shared-memory layout
// (WgmmaSmem), the named barriers (WgmmaBarriers) and the block's query rows (WgmmaJob).
#pragma once

#include "../common/attention_common.cuh"
#include "../common/ptx.cuh"
#include "grid_order.h"
#include "hopper.cuh"
#include "kv_to_half.h"
#include "wgmma_config.cuh"

namespace sdpa {

// TMA descriptors of the k and v codes as [B, H, S, D] tensors, with boxes of kBlockN rows: k swizzled for e4m3
// wgmma (wgmma_fp8) or plain like v. Predecoded, k and v describe the fp16 copies, k_codes and v_codes the plain
// codes that the grid decodes ahead as `plan` says. `order` is the grid's (predecoded, the plan's).
struct WgmmaMaps {
  CUtensorMap k, v;
  CUtensorMap k_codes, v_codes;
  KvDecodePlan plan;
  GridOrder order;
  int q_lookahead;  // the blocks the GPU runs at once (prefetch_later_q); 0 when unknown
};

template <class Cfg>
struct WgmmaSmem {
  uint8_t* base;  // 1024-byte aligned

  __device__ uint8_t* k_codes(int slot) const { return base + (Cfg::kSplitRings ? 0 : slot * Cfg::kSlotBytes); }
  __device__ uint8_t* v_codes(int slot) const { return k_codes(slot) + Cfg::kCodeTileBytes; }
  __device__ __half* v_halves(int slot) const {
    return Cfg::kSplitRings ? reinterpret_cast<__half*>(base + 2 * Cfg::kCodeTileBytes + slot * Cfg::kSlotBytes)
                            : reinterpret_cast<__half*>(v_codes(slot) + Cfg::kCodeTileBytes);
  }
  __device__ __half* k_halves(int slot) const { return v_halves(slot) + Cfg::kHalfTileBytes / 2; }
  __device__ uint8_t* v_transposed(int slot) const {  // kFp8Output
    return Cfg::kValuesByPass ? v_codes(slot) : v_codes(slot) + Cfg::kCodeTileBytes;
  }
  __device__ uint8_t* ahead_codes() const { return base + Cfg::kRingBytes; }  // two buffers
  __device__ __half* q_halves() const {
    return reinterpret_cast<__half*>(ahead_codes() + 2 * Cfg::kAheadBufferBytes);
  }
  __device__ float* partials() const { return reinterpret_cast<float*>(q_halves() + Cfg::kQTileBytes / 2); }
  __device__ uint64_t* tile_loaded(int slot) const {
    return reinterpret_cast<uint64_t*>(partials() + Cfg::kPartialBytes / 4) + slot;
  }
  __device__ uint64_t* ahead_loaded() const { return tile_loaded(Cfg::kStages); }  // two mbarriers
  // Predecoded: the V of the first tile, or with kSeparateValues of each slot.
  __device__ uint64_t* values_loaded(int slot) const { return ahead_loaded() + 2 + slot; }
  __device__ DecodeAheadJob* ahead_job() const {
    return reinterpret_cast<DecodeAheadJob*>(tile_loaded(0) + Cfg::kMbarriers);
  }
};

// Named barriers (id 0 is __syncthreads', then the consumers' after decode_q_tile and before a split unit's merge):
//   FULL(slot, group)  the producers arrive, consumer warpgroup `group` waits: one per group, so that the
//                      groups need not meet at every tile (two run half a tile apart, see TURN)
//   CODES_FREE(slot)   the groups arrive once Q K^T of the slot's tile is done: its K (and the codes the
//                      producers already decoded) may be overwritten
//   HALVES_FREE(slot)  the groups arrive once P V of the slot's tile is done: its fp16 V may be overwritten
//   TURN(group)        two groups: the other group arrives when `group` may issue its next wgmma batch
//   DECODE_AHEAD       predecoded, the three producer warps that decode ahead (kv_decode_ahead.cuh)
// In a split unit (kSplitTail) only the group that takes the tile waits for FULL and arrives at CODES_FREE and
// HALVES_FREE.
// With kSplitRings the consumers never read codes: CODES_FREE(0) is the producers' own barrier before they refill
// the one code slot.
// With kCopiesOnly the consumers wait on the TMA copy's mbarrier instead of FULL, and CODES_FREE frees a slot's
// fp16 K (kSeparateValues) or is not used.
template <class Cfg>
struct WgmmaBarriers {
  static constexpr int kGroups = Cfg::kConsumerGroups;
  __device__ static int full(int slot, int group) { return 1 + kGroups * slot + group; }
  __device__ static int codes_free(int slot) { return 1 + kGroups * Cfg::kStages + slot; }
  __device__ static int halves_free(int slot) { return 1 + (kGroups + 1) * Cfg::kStages + slot; }
  __device__ static int turn(int group) { return 1 + (kGroups + 2) * Cfg::kStages + group; }
  static constexpr int kDecodeAhead = 1 + (kGroups + 2) * Cfg::kStages + (Cfg::kTurns ? kGroups : 0);
  static constexpr int kGroupPair = Cfg::kProducerThreads + Cfg::kGroupThreads;  // FULL and TURN
  // HALVES_FREE's threads: the consumers that read the slot's tiles and every producer, which decode into the
  // slot; with kCopiesOnly the one producer warp that starts the copies.
  __device__ static int slot_users(int consumers) {
    return consumers + (Cfg::kCopiesOnly ? 32 : Cfg::kProducerThreads);
  }
  static_assert(kDecodeAhead + (Cfg::kPredecoded ? 1 : 0) <= 16, "16 named barriers per block");
  // Whether the consumers must free tile t's slot: the producers wait only for the slots they refill.
  __device__ static bool refilled(int tile, int tiles) { return tile >= 0 && tile + Cfg::kStages < tiles; }
};

// The query rows of a block: a tile of kBlockM rows, 64 per consumer group, or in a split unit (kSplitTail) 64
// rows whose key tiles the groups share, tile t going to group t % kConsumerGroups (and so always to the same
// slot).
struct WgmmaJob {
  HeadCoords c;
  int row0;
  bool split;
};

// Blocks from split_from on are split units, kConsumerGroups for each query tile from split_from on
// (split_tail_from in attention_wgmma.cu).
template <class Cfg>
__device__ __forceinline__ WgmmaJob wgmma_job(const AttentionParams& p, const GridOrder& order, int split_from,
                                              int block) {
  if (block < split_from) {
    const HeadCoords c = p.is_causal ? head_coords_heavy_first(order, block) : head_coords_in_order(order, block);
    return {c, c.tile * Cfg::kBlockM, false};
  }
  const int unit = block - split_from;
  const HeadCoords c = head_coords_in_order(order, split_from + unit / Cfg::kConsumerGroups);
  return {c, c.tile * Cfg::kBlockM + unit % Cfg::kConsumerGroups * 64, true};
}

// Waits until tile `tile` is in its slot for consumer group `group`: the producers' FULL, or with kCopiesOnly the TMA
// copies' mbarrier (predecoded, for the first tile its K only).
template <class Cfg>
__device__ __forceinline__ void wait_for_tile(const WgmmaSmem<Cfg>& smem, int tile, int slot, int group) {
  if constexpr (Cfg::kCopiesOnly) {
    mbarrier_wait(smem.tile_loaded(slot), tile / Cfg::kStages % 2);
  } else {
    barrier_sync(WgmmaBarriers<Cfg>::full(slot, group), WgmmaBarriers<Cfg>::kGroupPair);
  }
}

}  // namespace sdpa
