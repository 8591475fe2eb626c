// The producer warpgroup of a Hopper block: TMA copies of K/V tiles into the ring and, by variant, their decode to
// fp16 (decode_tile) or V's transpose for the E4M3 P V (transpose_v_tile).
#pragma once

#include "../common/tile_rows.cuh"
#include "kv_decode_ahead.cuh"
#include "wgmma_block.cuh"

namespace sdpa {

// Asks L2 for the q rows of the block maps.q_lookahead blocks on, which starts about when a block of this wave
// ends: its consumers then load q from L2 rather than from DRAM. Their first Q K^T waits for q (its first K tile
// lands before), so every block of every wave but the first paid that latency before its tensor cores started; more
// so for a q of fp16 values (twice the bytes, then quantized): before the first wgmma, `wgmma+predecode`'s warps
// spent 7.7% of their stall samples on q values against 5.0% on q codes (ncu, H200, 4x16x2048x128). The drop-in
// `auto` there, graph us, H200, same run, two rounds each: 255.5 / 254.4 -> 250.2 / 249.4, causal 182.8 / 181.8 ->
// 181.4 / 178.8; `fast` and D = 64 within the rounds' spread. One producer warp, a line a lane at a time.
template <class Cfg>
__device__ void prefetch_later_q(const AttentionParams& p, const WgmmaMaps& maps, int split_from, int lane) {
  const int later = static_cast<int>(blockIdx.x) + maps.q_lookahead;
  if (maps.q_lookahead == 0 || later >= split_from) return;
  const WgmmaJob job = wgmma_job<Cfg>(p, maps.order, split_from, later);
  const int rows = min(Cfg::kBlockM, p.seqlen_q - job.row0);
  const int element_bytes = p.q_row_groups ? 2 : 1;  // fp16 / bf16 values, or codes
  const int row_bytes = (p.q_row_groups ? p.q_dims : Cfg::kHeadDim) * element_bytes, lines = (row_bytes + 127) / 128;
  const uint8_t* first_row =
      p.q + (job.c.batch * p.q_batch_stride + job.c.head_q * p.q_head_stride + job.row0 * p.q_row_stride) *
                element_bytes;
  for (int i = lane; i < rows * lines; i += 32) {
    prefetch_l2(first_row + (i / lines) * p.q_row_stride * element_bytes + i % lines * 128);
  }
}

// Decodes a [kRows][D] tile of plain codes into fp16 panels (HalfPanelLayout).
// Producer thread `tid` keeps one 16-code column and steps kRowStep rows, a multiple of the swizzle's 8, so its
// chunks stay in place and every address is one base plus a constant. (Deriving row and column per chunk with
// signed divisions took ~45 instructions a chunk, and the producers of `wgmma` at 4x16x2048x128 were busy 92% of
// the time while the consumers waited for them: ncu, H200.)
// Shared-memory accesses of 16 bytes go out in phases of 8 threads, which must hit 8 different 16-byte bank groups.
// At D = 64 the 8 threads of a phase take two rows (r even, r + 1) of one panel: their first stores land on chunks
// {0, 2, 4, 6} ^ r % 8 and ^ (r + 1) % 8, distinct. At D = 128 the two 64-dim panels sit a multiple of 128 bytes
// apart, so a phase of one row's 8 columns stored chunk c of both panels into the same banks (a 2-way conflict,
// 8.7 M of 21.8 M store wavefronts); there each 16 threads take rows r and r + 1 of both panels, threads 0-3 row r
// panel 0, 4-7 row r + 1 panel 1, 8-11 row r panel 1, 12-15 row r + 1 panel 0: a phase stores to both row
// parities (distinct chunks) and loads 64 codes of each row from opposite halves (distinct banks). Before, the
// odd panel's threads stored their upper half first, at the cost of 4 selects per 16 codes: `wgmma` 254.1 /
// 910.0 against 244.8 / 868.6 us now at 4x16x2048x128 / 1x16x8192x128 (H200, same run).
template <class Cfg, int kRows>
__device__ __forceinline__ void decode_tile(const uint8_t* codes, __half* halves, int tid) {
  constexpr int kD = Cfg::kHeadDim, kChunksPerRow = kD / 16, kRowStep = Cfg::kProducerThreads / kChunksPerRow;
  static_assert(kRowStep % 8 == 0 && kRows % kRowStep == 0, "whole row steps that keep the swizzle");
  static_assert(kD == 64 || kD == 128, "one or two panels");
  const unsigned t = tid;
  const unsigned quarter = t % 16 / 4;  // D = 128: row parity quarter % 2, panel (quarter ^ quarter / 2) % 2
  const int row = kD == 64 ? t / kChunksPerRow : t / 16 * 2 + quarter % 2;
  const int col = kD == 64 ? t % kChunksPerRow * 16 : (quarter ^ quarter / 2) % 2 * 64 + t % 4 * 16;
  const uint8_t* src = codes + row * kD + col;
  __half* first = halves + HalfPanelLayout<kRows>::offset(row, col);
  __half* second = halves + HalfPanelLayout<kRows>::offset(row, col + 8);
  // Loads of kDecodeBatch rows ahead of their stores: ptxas keeps a load behind any earlier shared store (they
  // might alias), so with one row at a time each chunk waits out the load latency.
  constexpr int kBatch = Cfg::kDecodeBatch;
  static_assert(kRows / kRowStep % kBatch == 0, "whole batches");
#pragma unroll 2
  for (int step0 = 0; step0 < kRows / kRowStep; step0 += kBatch) {
    uint4 c[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      c[i] = *reinterpret_cast<const uint4*>(src + (step0 + i) * kRowStep * kD);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      *reinterpret_cast<uint4*>(first + (step0 + i) * kRowStep * 64) = decode_8(c[i].x, c[i].y);
      *reinterpret_cast<uint4*>(second + (step0 + i) * kRowStep * 64) = decode_8(c[i].z, c[i].w);
    }
  }
}

// The B operand of the E4M3 P V (kFp8Output): the V codes of a tile, [kBlockN keys][D] as TMA lands them
// (SwizzledCodeLayout<D>), transposed to [D][kBlockN] (SwizzledCodeLayout<kBlockN>, K-major for wgmma) with the
// keys of each 16 in the order of P's fragments (key_of_position): lane 4p + c of a quad holds positions 4c..4c + 3,
// keys 2c, 2c + 1, 2c + 8 and 2c + 9.
// A warp moves a unit of 16 keys x 32 dims per step. ldmatrix.trans reads it as four 8x8 matrices of byte pairs
// (keys 0-7 and 8-15 of dims 0-15, then of dims 16-31), so lane 4p + c holds, per matrix, keys 2c and 2c + 1 of
// dims 2p and 2p + 1; two byte permutes of the matrices of keys 0-7 and 8-15 give that lane's word of dim 2p and of
// dim 2p + 1, and stmatrix writes the words as four 8x8 matrices whose rows are dims of V^T. The lanes of quads
// 0-3 store their even dim in the first matrix of a pair, those of quads 4-7 their odd one, so that each matrix's
// 8 rows have 8 different dim % 8, which the swizzle spreads over all 32 banks (the reads, 8 consecutive keys, are
// spread by the codes' own swizzle). Per 16 bytes a lane issues one ldmatrix, four permutes and one stmatrix,
// where 32-bit loads and stores took four of each and twelve permutes.
template <class Cfg>
__device__ __forceinline__ void transpose_v_tile(const uint8_t* codes, uint8_t* transposed, int tid) {
  constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  constexpr int kGroups = kN / 16, kUnits = kGroups * (kD / 32), kWarps = Cfg::kProducerThreads / 32;
  static_assert(kUnits % kWarps == 0, "every warp takes as many units");
  using CodeLayout = SwizzledCodeLayout<kD>;
  using TransposedLayout = SwizzledCodeLayout<kN>;
  const int warp = tid / 32, lane = tid % 32;
  const int matrix = lane / 8, row = lane % 8;  // the row whose address the lane gives
  const uint32_t first = lane / 4 < 4 ? kEvenDimKeys : kOddDimKeys, second = first ^ kEvenDimKeys ^ kOddDimKeys;
  const int key = 8 * (matrix % 2) + row, dim = 16 * (matrix / 2);
  const int transposed_dim = dim + 2 * row + ((matrix % 2) ^ (row >= 4 ? 1 : 0));
#pragma unroll
  for (int step = 0; step < kUnits / kWarps; ++step) {
    const int unit = warp + step * kWarps, group = unit % kGroups, dim0 = unit / kGroups * 32;
    uint32_t pairs[4];
    ldmatrix_x4_trans(pairs, codes + CodeLayout::offset(16 * group + key, dim0 + dim));
    const uint32_t words[4] = {__byte_perm(pairs[0], pairs[1], first), __byte_perm(pairs[0], pairs[1], second),
                               __byte_perm(pairs[2], pairs[3], first), __byte_perm(pairs[2], pairs[3], second)};
    stmatrix_x4(transposed + TransposedLayout::offset(dim0 + transposed_dim, 16 * group), words);
  }
}

// The producer warpgroup: per tile the K and V codes by TMA, decoded to fp16. With a slot of codes per fp16 slot
// the copies run kStages - 1 tiles ahead and a code slot is refilled once the consumers' Q K^T of its tile is done
// (wgmma_fp8 reads the K codes), so the copy into it starts after the next tile is decoded; with kSplitRings the
// one code slot is refilled as soon as every producer has decoded it. fp16 slots are refilled once the P V of
// their tile is done (two tiles later in the consumers' pipeline).
// The decode costs: without the V decode (wrong results, timing only) `wgmma` took 223.5 against 252.8 us at
// 4x16x2048x128 and 811.8 against 910.4 at 1x16x8192x128 (H200, one run; 64-key tiles then), though the consumers
// hardly wait for FULL (ncu) and shared memory is not saturated (LSU wavefronts 51%, with wgmma's operand reads).
// Loading the codes straight into producer registers a tile ahead instead (no TMA copy, no shared-memory reads of
// codes; consumers at 208-224 registers to make room) was slower: 205.2 / 275.5 / 988.2 against 175.0 / 252.3 /
// 905.2 us at 4x16x2048x64 / 4x16x2048x128 / 1x16x8192x128, wgmma_fp8 236.0 against 194.5 at 4x16x2048x128.
template <class Cfg>
__device__ __forceinline__ void produce_tiles(const WgmmaSmem<Cfg>& smem, const WgmmaMaps& maps, const WgmmaJob& job,
                                              int tiles) {
  using Bars = WgmmaBarriers<Cfg>;
  static_assert(!Cfg::kCopiesOnly, "load_code_tiles, load_half_tiles");
  constexpr int kN = Cfg::kBlockN, kCodeSlots = Cfg::kSplitRings ? 1 : Cfg::kStages;
  constexpr int kConsumersReadCodes = Cfg::kSplitRings ? 0 : 1;  // the tiles a code slot stays busy after decoding
  const int tid = threadIdx.x - Cfg::kConsumerThreads;
  const bool elected = tid == 0;  // starts every copy
  const bool split = Cfg::kSplitTail && job.split;
  const int consumers = split ? Cfg::kGroupThreads : Cfg::kConsumerThreads;  // of each tile
  const HeadCoords& c = job.c;
  auto issue = [&](int tile) {
    if (elected && tile < tiles) {
      const int slot = tile % kCodeSlots;
      mbarrier_arrive_expect_bytes(smem.tile_loaded(slot), 2 * Cfg::kCodeTileBytes);
      tma_load_4d(smem.k_codes(slot), maps.k, 0, tile * kN, c.head_kv, c.batch, smem.tile_loaded(slot));
      tma_load_4d(smem.v_codes(slot), maps.v, 0, tile * kN, c.head_kv, c.batch, smem.tile_loaded(slot));
    }
  };
#pragma unroll
  for (int t = 0; t < kCodeSlots - kConsumersReadCodes; ++t) issue(t);

  for (int tile = 0; tile < tiles; ++tile) {
    const int slot = tile % Cfg::kStages, code_slot = tile % kCodeSlots;
    mbarrier_wait(smem.tile_loaded(code_slot), tile / kCodeSlots % 2);
    if (Bars::refilled(tile - Cfg::kStages, tiles)) {
      barrier_sync(Bars::halves_free(slot), Bars::slot_users(consumers));
    }
    if constexpr (Cfg::kFp8Output) {
      transpose_v_tile<Cfg>(smem.v_codes(code_slot), smem.v_transposed(slot), tid);
    } else {
      decode_tile<Cfg, kN>(smem.v_codes(code_slot), smem.v_halves(slot), tid);
    }
    if constexpr (!Cfg::kFp8Scores) decode_tile<Cfg, kN>(smem.k_codes(code_slot), smem.k_halves(slot), tid);
    fence_proxy_async();  // this thread's st.shared of the fp16 tiles before wgmma reads them
    if (split) {
      barrier_arrive(Bars::full(slot, tile % Cfg::kConsumerGroups), Bars::kGroupPair);
    } else {
#pragma unroll
      for (int group = 0; group < Cfg::kConsumerGroups; ++group) {
        barrier_arrive(Bars::full(slot, group), Bars::kGroupPair);
      }
    }
    // The next copy overwrites the codes of tile `freed`: its K once the consumers are done with it, its V codes
    // (and with kSplitRings its K) once every producer has decoded them (they all take part in this barrier).
    const int freed = tile - kConsumersReadCodes;
    if (freed >= 0 && freed + kCodeSlots < tiles) {
      barrier_sync(Bars::codes_free(freed % kCodeSlots), (kConsumersReadCodes ? consumers : 0) + Cfg::kProducerThreads);
    }
    issue(freed + kCodeSlots);
  }
}

// The copier of fp8_pv with kValuesByPass: one warp, whose first lane starts the TMA copies of each tile's K codes
// and V^T codes (transpose_values.h) into a slot once the consumers' P V of the tile it held is done (HALVES_FREE:
// every group, or in a split unit the one group that took the tile); the consumers wait on the copies' mbarrier
// themselves.
template <class Cfg>
__device__ __forceinline__ void load_code_tiles(const WgmmaSmem<Cfg>& smem, const WgmmaMaps& maps, const WgmmaJob& job,
                                                int tiles) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN;
  const bool elected = threadIdx.x % 32 == 0;
  const HeadCoords& c = job.c;
  const int consumers = Cfg::kSplitTail && job.split ? Cfg::kGroupThreads : Cfg::kConsumerThreads;
  for (int tile = 0, slot = 0; tile < tiles; ++tile, slot = slot + 1 == Cfg::kStages ? 0 : slot + 1) {
    if (Bars::refilled(tile - Cfg::kStages, tiles)) {
      barrier_sync(Bars::halves_free(slot), Bars::slot_users(consumers));
    }
    if (elected) {
      mbarrier_arrive_expect_bytes(smem.tile_loaded(slot), 2 * Cfg::kCodeTileBytes);
      tma_load_4d(smem.k_codes(slot), maps.k, 0, tile * kN, c.head_kv, c.batch, smem.tile_loaded(slot));
      tma_load_4d(smem.v_transposed(slot), maps.v, tile * kN, 0, c.head_kv, c.batch, smem.tile_loaded(slot));
    }
  }
}

// The copier of `wgmma+predecode`: one warp, whose first lane waits until the block's kv head is decoded and then
// starts the TMA copies of each tile's fp16 K and V panels into a slot once the consumers are done with the tile it
// held (HALVES_FREE); the consumers wait on the copies' mbarrier themselves.
// The first tile's K lands on its slot's mbarrier alone and its V on values_loaded, so that a block's first
// Q K^T waits for half the bytes (the consumers wait for that V after their first softmax). At 4x16x2048x128 (H200,
// clock64 stamps, medians over the blocks after the first wave) the first K tile was in shared memory ~3.1k cycles
// into a block against ~3.4k for K and V, and 6.0k against 6.5-7.5k in the first wave, whose blocks all copy at
// once; SM cycles of the attention kernel (base clock, interleaved): 362.8k, 362.8k -> 359.3k, 357.0k. Later tiles
// keep one mbarrier for K and V: one for each tile's V cost a second wait in every pass of the loop, 2432 against
// 2367 cycles per tile. With kSeparateValues every tile's K and V have mbarriers of their own, and K is copied once
// its slot's last Q K^T is done (CODES_FREE), V once its last P V is.
template <class Cfg>
__device__ __forceinline__ void load_half_tiles(const WgmmaSmem<Cfg>& smem, const WgmmaMaps& maps,
                                                const HeadCoords& c, int heads_kv, int tiles) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN, kBytes = Cfg::kHalfTileBytes;
  constexpr bool kSeparate = Cfg::kSeparateValues;
  const bool elected = threadIdx.x % 32 == 0;
  if (elected) wait_for_decoded_head(maps.plan, c.batch * heads_kv + c.head_kv);
  auto copy_panels = [&](const CUtensorMap& map, __half* halves, int tile, uint64_t* loaded) {
#pragma unroll
    for (int panel = 0; panel < Cfg::kHeadDim / 64; ++panel) {
      tma_load_4d(halves + panel * Cfg::kPanelBytes / 2, map, panel * 64, tile * kN, c.head_kv, c.batch, loaded);
    }
  };
  for (int tile = 0, slot = 0; tile < tiles; ++tile, slot = slot + 1 == Cfg::kStages ? 0 : slot + 1) {
    const bool refill = Bars::refilled(tile - Cfg::kStages, tiles);
    const bool own_values = kSeparate || tile == 0;  // V on values_loaded, not on K's mbarrier
    uint64_t* keys_loaded = smem.tile_loaded(slot);
    uint64_t* values_loaded = own_values ? smem.values_loaded(kSeparate ? slot : 0) : keys_loaded;
    if (refill) {
      barrier_sync(kSeparate ? Bars::codes_free(slot) : Bars::halves_free(slot),
                   Bars::slot_users(Cfg::kConsumerThreads));
    }
    if (elected) {
      mbarrier_arrive_expect_bytes(keys_loaded, own_values ? kBytes : 2 * kBytes);
      copy_panels(maps.k, smem.k_halves(slot), tile, keys_loaded);
    }
    if (kSeparate && refill) barrier_sync(Bars::halves_free(slot), Bars::slot_users(Cfg::kConsumerThreads));
    if (elected) {
      if (own_values) mbarrier_arrive_expect_bytes(values_loaded, kBytes);
      copy_panels(maps.v, smem.v_halves(slot), tile, values_loaded);
    }
  }
}

}  // namespace sdpa
