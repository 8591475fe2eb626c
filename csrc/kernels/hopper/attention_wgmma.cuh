// The Hopper variants (sm_90a): warpgroup MMA with a producer warpgroup, FlashAttention-3 style.
//   wgmma      full tier: Q and K decoded to fp16 (exact), S = Q K^T by fp16 wgmma with fp32 sums, Q from
//              registers
//   wgmma_fp8  fast tier: S = Q K^T by e4m3 wgmma straight on the codes; the Hopper FP8 tensor cores sum with
//              about 14 significant bits (lse off by up to 1.0e-3, by 1.5 at |lse| ~ 4000, and by 1.2e-3 of |lse|
//              where every product is positive; fp32 sums stay under 5.6e-4 and 5.0e-4)
//   wgmma_fp8+fp8_pv  O += P V by e4m3 wgmma too (kFp8Output): P cast to E4M3, V codes transposed by the producers
//              or, where a kv head has many query blocks, by a pass over memory (kValuesByPass)
//   wgmma+predecode  `wgmma` on fp16 copies of K and V (kv_to_half.h): TMA lands them in the ring as they are, so
//              no block decodes its own tiles, one producer warp starts the copies and the consumers wait on the
//              copies' mbarriers. Every query block of a head decoded all of its keys before; at 4x16x2048x128 the
//              attention kernel takes 207.2 against 245.2 us (H200). A pass over memory decodes the first kv
//              heads and the other three producer warps decode the rest ahead of the blocks that read
//              them (kv_decode_ahead.cuh): 5.9 us of pass and 210.1 of attention there, against 28.8 us for a pass
//              over every head. It pays where a kv head has many query rows (attention_dispatch.cu).
//   wgmma+predecode at D = 256: the one Hopper kernel there (WgmmaConfig::kWide), 64-key tiles in a ring of two,
//              Q as an fp16 tile in shared memory, each slot's K and V copied and freed apart (kSeparateValues)
//   wgmma_m192 `wgmma` at D = 64 with three consumer groups (192 query rows, kConsumerGroups), Q as an fp16 tile in
//              shared memory, the last wave split (WgmmaJob), and each group stopping after its own rows' key tiles
//              (kGroupTiles): 4x16x2048x64 148.5 against 165.9 us, causal 94.2 against 102.1 (H200, same run).
//   wgmma_fp8_m192+fp8_pv  `wgmma_fp8+fp8_pv` the same way (three groups, no turns, split tail, group tiles),
//              with Q's codes in registers (8 of them, 16 at D = 128): FlashAttention-3's 192-row FP8 tiles at
//              D = 64; at D = 128 on 64-key tiles, and with V^T from the pass where it pays.
//
// A block owns kBlockM = 128 query rows and runs three warpgroups:
//   producer     one thread starts TMA copies of each K/V tile (kBlockN keys) into a ring of kStages slots; the
//                warpgroup decodes V (and for `wgmma` K) to fp16 in shared memory and hands each slot over with a
//                named barrier.
//   2 consumers  64 query rows each; per tile
//                  S = Q K^T   wgmma with Q as A fragments in registers, loaded by each consumer from global memory
//                              at the start (fp16 for `wgmma`, codes for `wgmma_fp8`), and K from shared memory
//                  softmax     in registers: wgmma's accumulators are, per warp, the m16n8 C layout of 16 rows,
//                              so fragment_softmax.cuh applies unchanged
//                  O += P V    wgmma m64nDk16 f16, P from registers (the S accumulators re-packed), V N-major
//                              (fp8_pv: m64nDk32 e4m3 on P's E4M3 fragments and the transposed V codes)
// P stays fp16 (but for fp8_pv). Producers give up registers (setmaxnreg) to the consumers, which hold S
// (kBlockN / 2 floats), P (kBlockN / 4 words for the tile whose P V runs, and as many for the tile in the softmax
// without kLatePack; half that for fp8_pv), Q (D / 4 words of fp16 or D / 8 of codes) and O (D / 2 floats) per
// thread.
//
// Shared memory, every tile on a 1024-byte boundary (the hardware swizzle follows absolute address bits): per
//   slot K codes and V codes [kBlockN][D], fp16 V (+ fp16 K), then the mbarriers of the TMA copies. fp16 tiles
//   are D / 64 panels of [rows][64 dims] with the 128-byte swizzle (chunk ^ row % 8): K-major for K, N-major for
//   V. For `wgmma_fp8` the TMA writes K codes in wgmma's 64- or 128-byte swizzle of D-byte rows
//   (SwizzledCodeLayout); V codes are plain, or for fp8_pv in K's swizzle, and the slot's third tile is their
//   transpose [D][kBlockN] in the swizzle of kBlockN-byte rows instead of fp16 V (kValuesByPass: that transpose in
//   V's place, copied by TMA).
// The copies use TMA rather than cp.async: with cp.async (and the proxy fence that must follow the copies before
// wgmma may read the data) the ring never held more than one tile in flight and wgmma_fp8 took 401 us at
// 4x16x2048x128, 331 us with the V decode removed and 244 us with no loads at all (H200, nvcc 13.0); with TMA,
// 270 us. That the fence (MEMBAR.ALL.CTA in SASS) waited for the copies in flight was the guess then; timed alone it
// does not (scripts/probe_proxy_fence.cu: 17-21 cycles with copies in flight, 14 without).
#pragma once

#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"
#include "grid_order.h"
#include "hopper.cuh"
#include "kv_decode_ahead.cuh"
#include "transpose_values.h"

namespace sdpa {

template <int kHeadDim_, bool kFp8Scores_, bool kPredecoded_ = false, int kConsumerGroups_ = 2,
          bool kFp8Output_ = false, bool kValuesByPass_ = false, bool kQuantizesQRows_ = false>
struct WgmmaConfig {
  static constexpr int kHeadDim = kHeadDim_;
  // q of 16-bit values quantized by the consumers, a scale per 16 rows (p.q_row_groups; FragmentRows' kRowGroups,
  // quantize_q_tile); launch_wgmma_config takes this instantiation where p asks for it.
  static constexpr bool kQuantizesQRows = kQuantizesQRows_;
  using QuantizingQRows =
      WgmmaConfig<kHeadDim_, kFp8Scores_, kPredecoded_, kConsumerGroups_, kFp8Output_, kValuesByPass_, true>;
  static constexpr bool kFp8Scores = kFp8Scores_;
  // wgmma_fp8+fp8_pv: O += P V by e4m3 wgmma as well, on P cast to E4M3 and on V codes that the producers
  // transpose into the K-major B operand (transpose_v_tile) instead of decoding V to fp16. P is scaled by 2^4
  // before the cast (ScaledRowSoftmax): more P land on E4M3's normal values (from 2^-6) instead of its subnormals,
  // and with the row max's slack cut from 8 to 4 no P exceeds 256. H200, 2026-11-22, interleaved graph us against
  // wgmma_fp8 (fp16 P V): 196.2 / 204.3 at 4x16x2048x128, 695.9 / 723.1 at 1x16x8192x128, causal 119.7 / 125.4 and
  // 367.6 / 384.3, 165.0 / 167.2 at 4x16x2048x64; again 194.7 / 203.6, 688.3 / 718.5, causal 119.5 / 125.3; but in
  // the 5-round targets run 200.6 / 198.3, 713.9 / 704.9, causal 120.3 / 123.5 and 377.8 / 378.1 (the GPU at its
  // power limit). Halving the tensor work of P V gains little because the consumers' chain per tile (Q K^T
  // latency, the softmax's 64 MUFU.EX2 per thread, the waits) sets the pace, not the tensor pipe; without the turns
  // between the two groups it was the same (193.2, 676.1, causal 119.8). Output SQNR against float64 falls from
  // 55-73 dB to 30-44 dB (E4M3 keeps 3 mantissa bits of each P); the 2^4 scale adds 2.5-3.3 dB where rows are
  // peaked (scores scaled by 8 or 30) and nothing elsewhere.
  static constexpr bool kFp8Output = kFp8Output_;
  static_assert(!kFp8Output || kFp8Scores, "the fast tier only");
  // fp8_pv with V^T from a pass over memory (transpose_values.h) that the producers copy in by TMA: every query
  // block of a kv head transposes each of its tiles otherwise. The pass reads and writes V once, which pays only
  // where a kv head has many query blocks (values_by_pass_pays has the numbers); short heads lose (H200, graph us,
  // `wgmma_fp8_m64+fp8_pv` 67.4 / 76.3 at 32x16x257x128 with producers / the pass), so that variant never takes
  // it.
  static constexpr bool kValuesByPass = kValuesByPass_;
  static_assert(!kValuesByPass || (kFp8Output && kConsumerGroups_ >= 2), "V^T for fp8_pv's 128- or 192-row blocks");
  using Softmax = ScaledRowSoftmax<kFp8Output ? 4 : 0>;
  // K and V arrive as fp16 by TMA, decoded beforehand by kv_to_half.cu: no codes in shared memory, nothing for the
  // producers to decode (`wgmma+predecode`).
  static constexpr bool kPredecoded = kPredecoded_;
  static_assert(!(kPredecoded && kFp8Scores), "the fp8 scores read K codes");
  // Ring depth: the producer refills a slot while the consumers work through the other two. Slots of codes and
  // fp16 tiles of 128 keys would take 289 KB of the 227 KB a block may have at D = 128 with fp16 K (`wgmma`);
  // there the codes have a slot of their own that the producers decode from into a ring of fp16 K and V
  // (kSplitRings, 225 KB). Before, 64-key slots of both (145 KB): H200, graph us, same run, 64 / 128 keys:
  // 147.2 / 146.2 and 147.8 / 145.5 at causal 4x16x2048x128, 243.0 / 238.5 at 4x16x2048x128, 872.1 / 831.8 at
  // 1x16x8192x128, 61.4 / 59.7 at 1x16x2048x128, 69.8 / 69.6 at 4x16x1024x128 (causal 49.6 / 50.4). At D = 64
  // one code slot was slower (168.8 / 172.8 at 4x16x2048x64): the producers then wait for each copy.
  // wgmma_fp8: 193 KB; predecoded, without code tiles: 193 KB.
  // `wgmma` in three groups at D = 128 (64-key tiles, no split tail: its ring and Q tile leave no room for the
  // partials) fit 160 registers and passed the suite, but lost to two groups everywhere, its 32-register producers
  // decoding K and V for 1.5x the rows: H200, graph us, three / two groups / `wgmma+predecode`, 2026-11-28,
  // 4x16x2048x128 270.0 / 243.8 / 211.2, causal 148.3 / 143.0 / 135.3; 1x16x8192x128 986.1 / 885.1 / 761.6;
  // 8x16x512x128 45.0 / 41.5 / 45.8. Not built. Nor on fp16 copies (three predecoded groups, Q as an fp16 tile in
  // shared memory, no split tail): slower than `wgmma+predecode` everywhere, 5% at 4x16x2048x128 (231.1 against
  // 220.6 us) and 3-26% elsewhere (H200, 2026-11-28, 3 interleaved rounds; h200-2026-11-28-m192-predecode.json). By
  // count, per 64-key tile the three groups read Q, K and V from shared memory (144 KB, ~1150 cycles at 128 bytes a
  // cycle against ~1540 of tensor work), where two groups with Q in registers read 128 KB per 128-key tile of ~2050.
  static constexpr int kConsumerGroups = kConsumerGroups_;
  static_assert(kConsumerGroups == 2 ||
                    (kConsumerGroups == 3 && !kPredecoded && kFp8Output == kFp8Scores &&
                     (kHeadDim == 64 || kFp8Output)) ||
                    (kConsumerGroups == 1 && kFp8Scores),
                "three consumer groups: `wgmma` at D = 64, `wgmma_fp8+fp8_pv`; one: `wgmma_fp8[+fp8_pv]`");
  // One consumer group (64 query rows, `wgmma_fp8_m64`) runs two blocks per SM, so that one block's start and end
  // (its first Q K^T and exact softmax, its last P V and stores, where its tensor work stops) overlap the other's
  // key loop; wgmma_fp8's ring (three slots of 32 KB: 128 keys at D = 64, 64 at D = 128) fits twice. `wgmma`'s,
  // with fp16 K as well, fits twice only two slots deep, and so one group was slower than two or three: H100, graph
  // us, wgmma with one group / two / three, 180.6 / 171.1 / 147.7 at 4x16x2048x64, 182.8 / 180.4 / 174.3 at
  // 32x16x577x64.
  static constexpr int kBlocksPerSm = kConsumerGroups == 1 ? 2 : 1;
  // D = 256 (kWide): predecoded only, 64-key tiles (O takes 128 of a consumer's registers, S 32, P twice 16), Q
  // as an fp16 tile in shared memory (64 KB; its fp16 fragments would take 64 registers), and a ring of two 64 KB
  // slots, beside the decode-ahead buffers: 225 KB.
  static constexpr bool kWide = kHeadDim == 256;
  static_assert(!kWide || (kPredecoded && kConsumerGroups == 2), "D = 256: `wgmma+predecode`, two groups");
  static constexpr int kStages = kWide ? 2 : 3;
  // Predecoded, each slot's K and V land on mbarriers of their own, and K is refilled once the Q K^T that read it
  // is done (CODES_FREE), V once its P V is: with two slots of both refilled after the P V, a tile's copy would
  // start only when the consumers already wait for it. H200, graph us, two alternating runs, refilled together /
  // apart: 629.7, 629.1 / 446.3, 445.6 at 4x16x2048x256; 2237.1, 2234.9 / 1480.1, 1464.3 at 1x16x8192x256; causal
  // 354.9, 355.3 / 278.8, 269.6 at 4x16x2048x256; 44.4, 44.3 / 34.8, 34.6 at 2x8x1024x256. (With three slots the
  // refill has a tile's time to land, and a wait for each tile's V cost 2432 against 2367 cycles per tile at
  // D = 128: load_half_tiles.)
  static constexpr bool kSeparateValues = kPredecoded && kStages == 2;
  // Three groups (192 query rows): Q as an fp16 tile in shared memory (registers are short; wgmma_fp8's codes take 8,
  // at D = 128 16, and stay in registers), no turns (the named barriers run out), and the last wave's blocks split into
  // units of 64 rows whose keys the groups share. At 160 registers the consumers fit only with the guessed row max (the
  // exact max first: 169 against 154 us at 4x16x2048x64, H200) and with first_row derived (FragmentRows); producers at
  // 32 decode 2 rows per batch (4 spilled 4 bytes).
  static constexpr bool kTurns = kConsumerGroups == 2;
  static constexpr bool kQInSmem = (kConsumerGroups == 3 && !kFp8Scores) || kWide;
  static constexpr bool kSplitTail = kConsumerGroups == 3;
  // Each group stops after the key tiles of its own 64 rows (consume_tiles), where the block's tile count is that
  // of its last row: 192 rows span one and a half 128-key tiles, so on a causal diagonal the first group needs one
  // tile fewer than the last, and a group whose rows all lie past seqlen_q needs none. With turns a group could
  // not stop before the other.
  static constexpr bool kGroupTiles = !kTurns;
  static constexpr int kBlockM = 64 * kConsumerGroups;
  // One group at D = 128 takes 64-key tiles: slots of 128 keys (64 KB) fit twice only two deep. Three groups at
  // D = 128 too: O (64 floats), S of 64 keys (32), two sets of P codes (8 words each) and Q's codes (16 words) fit
  // their 160 registers, where S of 128 keys alone would take 64.
  static constexpr int kBlockN = (kConsumerGroups != 2 && kHeadDim == 128) || kWide ? 64 : 128;
  static constexpr bool kSplitRings = !kFp8Scores && !kPredecoded && kHeadDim == 128;
  // Predecoded at D = 128 the consumers keep Q as codes and convert it at every tile: with its fp16 fragments
  // held throughout they were one register short of 240 (a spill), and 112-key tiles instead took 223.2 against
  // 204.8 us at 4x16x2048x128 (H200, kernel time without the decode pass). (`wgmma` at D = 128 holds fp16 Q: with
  // codes its batch issue held both and spilled 40 bytes at 232.)
  static constexpr bool kQCodesForHalves = kPredecoded && kHeadDim == 128;
  // `wgmma` exponentiates S in place and packs P into the A fragments of P V only once the previous P V is done
  // (FragmentRows::exponentials; a guessed row max that fails recomputes S from the fp16 K tile, which stays in
  // the slot until that P V: WarpgroupAttention::recompute_scores). The others write P into separate fragments
  // during the softmax and copy them over after the wait (`next`, replace_fragments). H200, graph us, same run,
  // in place against `next`: `wgmma` 169.6 / 176.4 at 4x16x2048x64, 570.9 / 619.0 at 1x16x8192x64, 245.3 / 260.6
  // at 4x16x2048x128, 910.8 / 937.3 at 1x16x8192x128 (causal 102.9 / 104.3, 301.4 / 319.8, 150.8 / 153.9,
  // 472.7 / 491.9). Predecoded at D = 128, even with Q's fp16 fragments held in the registers `next` leaves: 232.6
  // / 232.5 at 4x16x2048x128, 789.7 / 730.4 at 1x16x8192x128. wgmma_fp8 keeps K as codes, which it releases right
  // after Q K^T.
  static constexpr bool kLatePack = !kFp8Scores && !kPredecoded;
  // How the exponentials scale S first for logits from 2^22 (fragment_softmax.cuh's Prescale: the one that fits;
  // FragmentRows::exponentials takes its own loop).
  static constexpr Prescale kPrescale = kFp8Scores ? Prescale::kAhead : Prescale::kOwnLoop;
  static constexpr int kGroupThreads = 128;  // a consumer warpgroup
  static constexpr int kConsumerThreads = kGroupThreads * kConsumerGroups, kProducerThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kCodeTileBytes = kPredecoded ? 0 : kBlockN * kHeadDim;
  static constexpr int kPanelBytes = kBlockN * 64 * 2;       // 64 dims of an fp16 K or V tile
  static constexpr int kHalfTileBytes = kHeadDim / 64 * kPanelBytes;
  static constexpr int kSlotBytes = (kSplitRings ? 0 : 2 * kCodeTileBytes) +
                                    (kValuesByPass ? 0
                                     : kFp8Output  ? kCodeTileBytes
                                                   : (kFp8Scores ? 1 : 2) * kHalfTileBytes);
  // The A fragments of P V: E4M3 codes for k32 steps, or fp16 for k16 steps.
  using Probabilities = std::conditional_t<kFp8Output, uint32_t[kBlockN / 32][4], uint32_t[kBlockN / 16][4]>;
  static constexpr int kRingBytes = (kSplitRings ? 2 * kCodeTileBytes : 0) + kStages * kSlotBytes;
  // Rows per batch of the producers' decode (decode_tile). H200, graph us at 4x16x2048x128 / 1x16x8192x128,
  // one run: `wgmma` 321 / 1187 with one row at a time, 289 / 1030 with 4; `wgmma_fp8`, which decodes only V,
  // 232 / 802 with one, 241 / 867 with 4.
  static constexpr int kDecodeBatch = kFp8Scores ? 1 : kConsumerGroups == 3 ? 2 : 4;
  // Predecoded: two buffers of a code tile for the producers' decode ahead (kv_decode_ahead.cuh); 225 KB in all
  // at D = 128.
  static constexpr int kAheadBufferBytes = kPredecoded ? kBlockN * kHeadDim : 0;
  // An mbarrier per slot and per decode-ahead buffer (predecoded, one more for the first tile's V, or with
  // kSeparateValues one per slot for V: load_half_tiles), and the DecodeAheadJob.
  static constexpr int kMbarriers = kStages + 2 + (kSeparateValues ? kStages : kPredecoded ? 1 : 0);
  static constexpr int kBarrierBytes = 8 * kMbarriers + sizeof(DecodeAheadJob);
  static constexpr int kQTileBytes = kQInSmem ? kBlockM * kHeadDim * 2 : 0;
  // A split unit's groups 1 and 2 leave their O, row max and row sums (kPartialFloats per lane) for group 0.
  static constexpr int kPartialFloats = kHeadDim / 2 + 4;
  static constexpr int kPartialBytes = kSplitTail ? (kConsumerGroups - 1) * kGroupThreads * kPartialFloats * 4 : 0;
  static constexpr int kSmemBytes = 1024 + kRingBytes + 2 * kAheadBufferBytes + kQTileBytes + kPartialBytes +
                                    kBarrierBytes;  // + aligning the base
  // The producer warpgroup only starts TMA copies (one warp) where nothing is decoded or transposed in the block:
  // predecoded, or V^T by the pass. The consumers then wait on the copies' mbarriers instead of FULL.
  static constexpr bool kCopiesOnly = kPredecoded || kValuesByPass;
  // Whether the consumers free a slot's codes once its Q K^T is done (CODES_FREE): predecoded there are none, but
  // with kSeparateValues its fp16 K; with kSplitRings the producers free their one code slot themselves; with
  // kValuesByPass K's codes stay until the slot's V^T is done with.
  static constexpr bool kConsumersFreeCodes = kPredecoded ? kSeparateValues : !kSplitRings && !kValuesByPass;
  // 256 x 232 + 128 x 40 = 64512 of the SM's 65536 registers (fp8_pv too: its transpose by ldmatrix/stmatrix fits
  // the producers' 40; 216 + 72 timed the same); producers that only start copies need fewer. Three groups:
  // 384 x 160 + 128 x 32 = 65536.
  // One group, two blocks per SM: 128 x 216 + 128 x 40 = 32768, half the SM's registers.
  static constexpr int kConsumerRegisters = kConsumerGroups == 3 ? 160
                                            : kCopiesOnly          ? 240
                                            : kConsumerGroups == 1 ? 216
                                                                   : 232;
  static constexpr int kProducerRegisters = kConsumerGroups == 3 ? 32 : kCopiesOnly ? 24 : 40;
  // setmaxnreg only moves registers within what the block was launched with (65536 / 384 threads = 168 each): a
  // split that asks for more leaves the consumers' setmaxnreg.inc waiting forever (a hang, seen with 224 + 64).
  static_assert(kConsumerThreads * kConsumerRegisters + kProducerThreads * kProducerRegisters <=
                    kThreads * (65536 / kBlocksPerSm / kThreads / 8 * 8),
                "register split beyond the block's allocation");
};

// TMA descriptors of the k and v codes as [B, H, S, D] tensors, with boxes of kBlockN rows: k swizzled for e4m3
// wgmma (wgmma_fp8) or plain like v. Predecoded, k and v describe the fp16 copies, k_codes and v_codes the plain
// codes that the grid decodes ahead as `plan` says. `order` is the grid's (predecoded, the plan's).
struct WgmmaMaps {
  CUtensorMap k, v;
  CUtensorMap k_codes, v_codes;
  KvDecodePlan plan;
  GridOrder order;
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
__device__ __forceinline__ WgmmaJob wgmma_job(const AttentionParams& p, const GridOrder& order, int split_from) {
  const int block = blockIdx.x;
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

// decode_q_tile for a q of 16-bit values (p.q_row_groups): each consumer warp takes the amax of the 16 rows it
// attends (consume_tiles: rows 16 w of the job, or of its 64 rows in a split unit) and returns their scale
// (power_of_two_scale), as FragmentRows::quantize_q_chunks does for Q in registers; the warp whose index they are
// encodes them (the values held from their load to their encode) and decodes the codes into the tile.
template <class Cfg, typename T>
__device__ float quantize_q_tile(const WgmmaSmem<Cfg>& smem, const AttentionParams& p, const WgmmaJob& job,
                                 uint32_t sign, int rows) {
  constexpr int kChunksPerRow = Cfg::kHeadDim / 16, kLaneChunks = 16 * kChunksPerRow / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp % (rows / 16);
  const T* head = reinterpret_cast<const T*>(p.q) + job.c.batch * p.q_batch_stride + job.c.head_q * p.q_head_stride;
  auto row_of = [&](int i) { return 16 * group + (lane + 32 * i) / kChunksPerRow; };
  auto col_of = [&](int i) { return (lane + 32 * i) % kChunksPerRow * 16; };
  uint4 raw[kLaneChunks][2];  // the lane's chunks
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kLaneChunks; ++i) {
    const int row = job.row0 + row_of(i);
    load_q_values(head + row * p.q_row_stride + col_of(i), row < p.seqlen_q, raw[i]);
    amax = fmaxf(amax, fmaxf(vector_amax<T>(raw[i][0]), vector_amax<T>(raw[i][1])));
  }
  const float scale = power_of_two_scale(group_max<32>(amax));
  if (group != warp) return scale;
  const E4m3PowerOfTwoDivisor divisor(scale);
#pragma unroll
  for (int i = 0; i < kLaneChunks; ++i) {
    store_decoded_16<HalfPanelLayout<Cfg::kBlockM>>(smem.q_halves(), row_of(i), col_of(i),
                                                    encode_q_values<T>(raw[i], divisor, sign));
  }
  return scale;
}

// The job's Q rows as an fp16 tile (HalfPanelLayout, signs flipped for a negative scale, rows past seqlen_q zero)
// for three consumer groups or D = 256 (kQInSmem), decoded by the consumers 16 codes at a time while the producers
// wait for the first tile; barrier 0 then holds the consumers until the tile is complete. (Decoded by the whole
// block before the producers started: 158.7 against 154 us at 4x16x2048x64, H200.) With kQuantizesQRows quantized
// from values instead (quantize_q_tile); returns the scale of the calling warp's rows then, else 1.
template <class Cfg>
__device__ __forceinline__ float decode_q_tile(const WgmmaSmem<Cfg>& smem, const AttentionParams& p,
                                               const WgmmaJob& job) {
  constexpr int kChunksPerRow = Cfg::kHeadDim / 16;
  const int rows = job.split ? 64 : Cfg::kBlockM;
  float rows_scale = 1.0f;
  if constexpr (Cfg::kQuantizesQRows) {
    const uint32_t sign = ScoreScale(p, job.c, 1.0f).flip_q ? 0x80808080u : 0u;
    rows_scale = p.q_type == QueryType::kBFloat16 ? quantize_q_tile<Cfg, __nv_bfloat16>(smem, p, job, sign, rows)
                                                  : quantize_q_tile<Cfg, __half>(smem, p, job, sign, rows);
  } else {
    const uint32_t sign = ScoreScale(p, job.c).flip_q ? 0x80808080u : 0u;
    const uint8_t* q = q_head(p, job.c);
    for (int chunk = threadIdx.x; chunk < rows * kChunksPerRow; chunk += Cfg::kConsumerThreads) {
      const int row = chunk / kChunksPerRow, col = chunk % kChunksPerRow * 16;
      uint4 codes = make_uint4(0, 0, 0, 0);
      if (job.row0 + row < p.seqlen_q) {
        codes = *reinterpret_cast<const uint4*>(q + (job.row0 + row) * p.q_row_stride + col);
        codes = make_uint4(codes.x ^ sign, codes.y ^ sign, codes.z ^ sign, codes.w ^ sign);
      }
      store_decoded_16<HalfPanelLayout<Cfg::kBlockM>>(smem.q_halves(), row, col, codes);
    }
  }
  fence_proxy_async();  // this thread's st.shared of the tile before wgmma reads it
  barrier_sync(0, Cfg::kConsumerThreads);
  return rows_scale;
}

// One warp of a consumer warpgroup: its 16 query rows of the group's 64 (the softmax state of FragmentRows).
template <class Cfg>
struct WarpgroupAttention : FragmentRows<Cfg::kHeadDim / 8, typename Cfg::Softmax, Cfg::kQuantizesQRows> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  static constexpr int kQSteps = Cfg::kFp8Scores ? kD / 32 : kD / 16;  // k32 steps of codes or k16 of fp16
  static constexpr int kQWords = Cfg::kQCodesForHalves ? 2 : 4;
  using FragmentRows<kD / 8, typename Cfg::Softmax, Cfg::kQuantizesQRows>::o;
  // The warp's 16 rows of Q: A fragments of E4M3 codes (wgmma_fp8) or fp16 (wgmma), or with kQCodesForHalves the
  // codes of the fp16 fragments (load_half_q_codes), converted into q_halves before each Q K^T.
  struct NoFragments {};
  std::conditional_t<Cfg::kQInSmem, NoFragments, uint32_t[kQSteps][kQWords]> q;
  std::conditional_t<Cfg::kQCodesForHalves, uint32_t[kQSteps][4], NoFragments> q_halves;
  // Shared-memory descriptors of slot 0's K and V tiles, low words (descriptor_high: kKHigh, kHalfHigh). Slot s
  // lies s * kSlotBytes further, s * kSlotUnits in the descriptor's 16-byte start field, which cannot carry
  // (shared addresses stay below 2^18): one multiply-add per tile instead of deriving each descriptor from
  // tile % kStages (a chain of ~10 dependent uniform instructions before each batch of wgmma).
  uint32_t k_desc0, v_desc0;
  // kQInSmem: the descriptor of the warpgroup's 64 rows of the Q tile (low word).
  uint32_t q_desc;
  static constexpr uint32_t kSlotUnits = Cfg::kSlotBytes / 16;
  static constexpr uint64_t kHalfHigh = descriptor_high(1024, 128);
  static constexpr uint64_t kKHigh = Cfg::kFp8Scores ? descriptor_high(8 * kD, kD) : kHalfHigh;
  static constexpr uint64_t kVHigh = Cfg::kFp8Output ? descriptor_high(8 * kN, kN) : kHalfHigh;

  // Q of the warp's rows, from global memory. In registers it spares the tensor cores shared-memory reads at every
  // tile, and the producers a load or decode at the start of every block. (wgmma_fp8 with Q codes in shared
  // memory, loaded by TMA and sign-flipped by the producers, against registers, one run on an H200: 183.6 / 227.0
  // / 779.4 against 179.4 / 213.3 / 730.3 us at 4x16x2048x64 / 4x16x2048x128 / 1x16x8192x128.)
  __device__ void set_q(const AttentionParams& p, const HeadCoords& c, bool flip_q, int lane) {
    if constexpr (Cfg::kQInSmem) {
      return;  // decoded into shared memory by the consumers (decode_q_tile)
    } else if constexpr (Cfg::kFp8Scores) {
      this->load_code_q(q, CallQuery{p, c}, flip_q, lane);
    } else if constexpr (Cfg::kQCodesForHalves) {
      this->load_half_q_codes(q, CallQuery{p, c}, flip_q, lane);
    } else {
      this->load_half_q(q, CallQuery{p, c}, flip_q, lane);
    }
  }

  // K K-major. Code tiles (wgmma_fp8): 8-row groups 8 * kD bytes apart. fp16 panels (wgmma): 8-row groups 1024
  // bytes apart. V N-major: 128-byte rows of 64 dims, panels kPanelBytes apart, 8-key groups 1024 bytes apart.
  // kQInSmem: the Q tile as the A operand, K-major like fp16 K; the warpgroup's rows start at q_row0.
  __device__ void set_descriptors(const WgmmaSmem<Cfg>& smem, int q_row0) {
    if constexpr (Cfg::kQInSmem) {
      q_desc = descriptor_low(smem.q_halves() + HalfPanelLayout<Cfg::kBlockM>::offset(q_row0, 0), 16);
    }
    k_desc0 = descriptor_low(Cfg::kFp8Scores ? static_cast<const void*>(smem.k_codes(0)) : smem.k_halves(0), 16);
    v_desc0 = Cfg::kFp8Output ? descriptor_low(smem.v_transposed(0), 16)
                              : descriptor_low(smem.v_halves(0), Cfg::kPanelBytes);
  }

  // With kQCodesForHalves, the fp16 fragments of Q for the next issue_scores; before its wgmma_fence, since
  // conversions between the wgmma made ptxas put a warpgroup.arrive before each.
  __device__ void convert_q() {
    if constexpr (Cfg::kQCodesForHalves) {
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) half_q_fragment(q[ks], q_halves[ks]);
    }
  }

  // Starts S = Q K^T for the slot's tile (one commit group). Code tiles: a k32 step is 32 bytes = 2 descriptor
  // units. fp16 panels (K, and Q with kQInSmem): a k16 step is 32 bytes within a panel's 128-byte rows, then the
  // next panel.
  __device__ void issue_scores(float (&s)[kN / 8][4], int slot) {
    const uint32_t k_desc = k_desc0 + slot * kSlotUnits;
    // Q's descriptors derived anew for each tile: hoisted, they took 8 registers across the loop (and spilled).
    const uint32_t q_tile = tied_to(q_desc, slot);
    if constexpr (Cfg::kFp8Scores) {
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) wgmma_e4m3_rs(s, q[ks], kKHigh | (k_desc + 2 * ks), ks > 0);
    } else {
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) {
        const int panel = ks / 4, step = 2 * (ks % 4);
        const uint64_t b = kKHigh | (k_desc + panel * (Cfg::kPanelBytes / 16) + step);
        if constexpr (Cfg::kQInSmem) {
          wgmma_f16_ss(s, kHalfHigh | (q_tile + panel * (Cfg::kBlockM * 128 / 16) + step), b, ks > 0);
        } else if constexpr (Cfg::kQCodesForHalves) {
          wgmma_f16_rs<false>(s, q_halves[ks], b, ks > 0);
        } else {
          wgmma_f16_rs<false>(s, q[ks], b, ks > 0);
        }
      }
    }
    wgmma_commit();
  }

  // S = Q K^T of the warp's 16 rows again, for the rare tile whose guessed row max failed after the exponentials
  // had replaced S (kLatePack): by mma.sync (m16n8k16, fp32 sums) from the slot's fp16 K tile and Q's A fragments,
  // the same products as the wgmma summed in another order. Not by wgmma: ptxas serializes every wgmma of a
  // kernel after one issued under a condition.
  // With kQInSmem the Q fragments come from the Q tile by ldmatrix (matrix m: rows 8 (m % 2), dims 8 (m / 2)).
  __device__ void recompute_scores(float (&s)[kN / 8][4], const WgmmaSmem<Cfg>& smem, int slot, int lane) const {
    static_assert(Cfg::kLatePack && !Cfg::kQCodesForHalves, "fp16 K tiles and Q fragments");
    if constexpr (Cfg::kQInSmem) {
      const int mat = lane / 8, row = threadIdx.x / 32 * 16 + mat % 2 * 8 + lane % 8;  // not a split unit
      half_tile_scores<HalfPanelLayout<kN>, kD / 16>(s, [&](int ks, uint32_t (&a)[4]) {
        ldmatrix_x4(a, smem.q_halves() + HalfPanelLayout<Cfg::kBlockM>::offset(row, ks * 16 + mat / 2 * 8));
      }, smem.k_halves(slot), lane);
    } else {
      half_tile_scores<HalfPanelLayout<kN>>(s, q, smem.k_halves(slot), lane);
    }
  }

  // Starts O += P V for the slot's tile (one commit group). fp16 V N-major: a k16 step is 16 keys = 2048 bytes,
  // 128 descriptor units. Transposed V codes (kFp8Output): a k32 step is 32 bytes of its 128-byte rows.
  __device__ void issue_output(const typename Cfg::Probabilities& a, int slot) {
    const uint32_t v_desc = v_desc0 + slot * kSlotUnits;
    if constexpr (Cfg::kFp8Output) {
#pragma unroll
      for (int kt = 0; kt < kN / 32; ++kt) wgmma_e4m3_rs(o, a[kt], kVHigh | (v_desc + 2 * kt), true);
    } else {
#pragma unroll
      for (int kt = 0; kt < kN / 16; ++kt) wgmma_f16_rs<true>(o, a[kt], kHalfHigh | (v_desc + 128 * kt), true);
    }
    wgmma_commit();
  }

  // A split unit's end: groups 1 and 2 leave their O, row max and lane row sums in `partials` (per warp and
  // float4, lane-major: conflict-free) and return false; group 0 merges them into its own, M = max m_g,
  // O = sum O_g 2^(f_g - F), sum = sum sum_g 2^(f_g - F) with f and F the exp2 offsets of m_g and M (a group that
  // saw nothing of a row has m_g = -inf and weight 0), and returns true to store the rows. The max is the same on
  // the lanes of a quad, so the lane sums merge before finish_rows reduces them.
  __device__ bool merge_split_groups(float* partials, int group, int lane) {
    constexpr int kFloats = Cfg::kPartialFloats, kOFloats = kD / 2;
    static_assert(kFloats == kOFloats + 4 && kFloats % 4 == 0, "O, then max and sum of both rows");
    const int warp_in_group = threadIdx.x / 32 % 4;
    auto partial = [&](int g, int i) {  // float4 i of group g's lane
      return reinterpret_cast<float4*>(partials) + (((g - 1) * 4 + warp_in_group) * (kFloats / 4) + i) * 32 + lane;
    };
    if (group > 0) {
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) *partial(group, dt) = make_float4(o[dt][0], o[dt][1], o[dt][2], o[dt][3]);
      *partial(group, kOFloats / 4) =
          make_float4(this->softmax[0].max, this->softmax[1].max, this->softmax[0].sum, this->softmax[1].sum);
    }
    barrier_sync(0, Cfg::kConsumerThreads);  // the producers are done: id 0 is free
    if (group > 0) return false;
    // One group's partials at a time: unrolled, at D = 128 the loads of both were hoisted and spilled 20 bytes.
#pragma unroll 1
    for (int g = 1; g < Cfg::kConsumerGroups; ++g) {
      const float4 state = *partial(g, kOFloats / 4);
      const float max[2] = {state.x, state.y}, sum[2] = {state.z, state.w};
      float mine[2], theirs[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float merged = fmaxf(this->softmax[r].max, max[r]);
        const float reference = Cfg::Softmax::offset_of(merged);
        mine[r] = merged == -INFINITY ? 1.0f : exp2f(this->softmax[r].offset() - reference);
        theirs[r] = max[r] == -INFINITY ? 0.0f : exp2f(Cfg::Softmax::offset_of(max[r]) - reference);
        this->softmax[r].max = merged;
        this->softmax[r].sum = this->softmax[r].sum * mine[r] + sum[r] * theirs[r];
      }
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
        const float4 other = *partial(g, dt);
        o[dt][0] = o[dt][0] * mine[0] + other.x * theirs[0];
        o[dt][1] = o[dt][1] * mine[0] + other.y * theirs[0];
        o[dt][2] = o[dt][2] * mine[1] + other.z * theirs[1];
        o[dt][3] = o[dt][3] * mine[1] + other.w * theirs[1];
      }
    }
    return true;
  }
};

// A split unit's loop (kSplitTail): group g takes tiles g, g + kConsumerGroups, ..., all in slot g, and waits for
// each P V before it asks for its next tile: with one slot per group the producers cannot load that tile before the
// P V is done. The groups overlap one another instead. With kCopiesOnly (V^T by the pass) the group waits on its
// slot's copies and frees the slot after P V only.
template <class Cfg>
__device__ __forceinline__ void consume_split_tiles(WarpgroupAttention<Cfg>& w, const WgmmaSmem<Cfg>& smem,
                                                    const AttentionParams& p, int group, int tiles, int lane) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN, kConsumers = Cfg::kGroupThreads;
  static_assert(Cfg::kStages == Cfg::kConsumerGroups, "tile t in slot t % kStages is group t's slot");
  const int slot = group;
  for (int tile = group; tile < tiles; tile += Cfg::kConsumerGroups) {
    float s[kN / 8][4];
    typename Cfg::Probabilities a;
    wait_for_tile<Cfg>(smem, tile, slot, group);
    wgmma_fence();
    w.issue_scores(s, slot);
    wgmma_wait<0>();
    pin_registers(s);
    const bool refilled = Bars::refilled(tile, tiles);
    if (refilled && Cfg::kConsumersFreeCodes) barrier_arrive(Bars::codes_free(slot), Bars::slot_users(kConsumers));
    w.template scores_to_probabilities</*kGuessMax=*/true, Cfg::kPrescale>(s, tile * kN, p, lane, a);
    wgmma_fence();
    w.issue_output(a, slot);
    wgmma_wait<0>();
    pin_registers(a);
    pin_registers(w.o);
    if (refilled) barrier_arrive(Bars::halves_free(slot), Bars::slot_users(kConsumers));
  }
}

// The two consumer groups take turns issuing their wgmma batches (TURN barriers), so that one group's softmax runs
// while the other's matrix products occupy the tensor cores. A group issues tile t's Q K^T together with tile
// t - 1's P V, waits for Q K^T only and runs the softmax of tile t (guessing that the row max stays,
// online_softmax_scores) while that P V still runs, writing P into separate A fragments (`next`); then it waits
// for the P V, rescales O and takes over the new fragments (replace_fragments). With kLatePack the softmax leaves
// P in S as fp32 and packs it into the fragments after the wait instead. Nothing stays in flight across
// loop passes: ptxas serialized every wgmma when a partial wait did. Batches: S(0); S(t) + PV(t - 1) for
// t >= 1; PV(last).
// H200, graph us, one run, with / without P V in flight during the softmax: `wgmma` 174.6 / 177.2 at
// 4x16x2048x64, 253.1 / 264.0 at 4x16x2048x128, 912.5 / 946.9 at 1x16x8192x128 (causal 104.7 / 106.3,
// 152.7 / 155.2, 469.3 / 485.2); `wgmma_fp8` 162.1 / 164.3, 193.8 / 195.2, 694.5 / 696.8. Earlier, before the
// guessed max, a schedule with P V in flight wrote P into the fragments that P V read, which forced the exact row
// max first; turns at D = 128: without / with, 277.7 / 270.8 and 985.2 / 944.7 us.
template <class Cfg, typename OutT>
__device__ __forceinline__ void consume_tiles(const WgmmaSmem<Cfg>& smem, const AttentionParams& p,
                                              const WgmmaJob& job, int tiles) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN;
  // The group through a shuffle, which tells ptxas that it is the same across the warp: values derived from it
  // (group_tiles) may then sit in uniform registers, and the three-group consumers fit their 160 registers (with
  // warp / 4 they spilled 20 bytes).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = __shfl_sync(0xFFFFFFFFu, warp / 4, 0);
  const HeadCoords& c = job.c;
  const bool split = Cfg::kSplitTail && job.split;
  const int q_row0 = split ? 0 : 64 * group;  // the group's rows in the job's
  // kQInSmem with kQuantizesQRows: the job's Q tile, and the scale of the warp's rows in it (without, the kernel
  // decodes the tile before it calls this).
  float q_rows_scale = 1.0f;
  if constexpr (Cfg::kQInSmem && Cfg::kQuantizesQRows) q_rows_scale = decode_q_tile<Cfg>(smem, p, job);
  WarpgroupAttention<Cfg> w;
  w.set_q(p, c, w.start(p, c, job.row0 + q_row0, warp % 4, lane), lane);
  if constexpr (Cfg::kQInSmem && Cfg::kQuantizesQRows) w.score_scale = ScoreScale(p, c, q_rows_scale).log2_units;
  w.set_descriptors(smem, q_row0);
  if constexpr (Cfg::kSplitTail) {
    if (split) {
      consume_split_tiles(w, smem, p, group, tiles, lane);
      if (w.merge_split_groups(smem.partials(), group, lane)) w.template store_output<OutT>(p, c, lane);
      return;
    }
  }
  // The tiles this group multiplies: the block's first group_tiles; the producers still load all `tiles`.
  const int group_tiles = Cfg::kGroupTiles ? key_tiles_of_rows(p, job.row0 + q_row0, 64, kN) : tiles;
  // Lets the producers overwrite the codes of the slot's tile once its Q K^T is done.
  auto free_codes = [&](int tile, int slot) {
    if (Cfg::kConsumersFreeCodes && Bars::refilled(tile, tiles)) {
      barrier_arrive(Bars::codes_free(slot), Bars::slot_users(Cfg::kConsumerThreads));
    }
  };
  // Lets the producers refill the slot of a tile once its P V is done (they wait only for the slots they refill).
  auto free_halves = [&](int tile, int slot) {
    if (Bars::refilled(tile, tiles)) barrier_arrive(Bars::halves_free(slot), Bars::slot_users(Cfg::kConsumerThreads));
  };
  // Predecoded, waits for the first tile's V (load_half_tiles), before any P V; with kSeparateValues for each
  // tile's V before its P V.
  auto wait_for_values = [&](int tile, int slot) {
    if constexpr (Cfg::kSeparateValues) {
      mbarrier_wait(smem.values_loaded(slot), tile / Cfg::kStages % 2);
    } else if constexpr (Cfg::kPredecoded) {
      if (tile == 0) mbarrier_wait(smem.values_loaded(0), 0);
    }
  };
  auto take_turn = [&] {
    if constexpr (Cfg::kTurns) barrier_sync(Bars::turn(group), Bars::kGroupPair);
  };
  auto pass_turn = [&] {
    if constexpr (Cfg::kTurns) barrier_arrive(Bars::turn(1 - group), Bars::kGroupPair);
  };
  // Lets the producers past tile `tile`, which the group leaves out (from group_tiles on): its FULL taken, its
  // codes and its fp16 slot freed.
  auto skip_tile = [&](int tile) {
    const int slot = tile % Cfg::kStages;
    wait_for_tile<Cfg>(smem, tile, slot, group);
    free_codes(tile, slot);
    free_halves(tile, slot);
  };
  if constexpr (Cfg::kGroupTiles) {
    if (group_tiles == 0) {  // rows past seqlen_q only: no wgmma at all
      for (int tile = 0; tile < tiles; ++tile) skip_tile(tile);
      return;
    }
  }
  if (group == 1) pass_turn();  // group 0 issues first

  float s[kN / 8][4];      // S of the current tile
  typename Cfg::Probabilities a;  // P of the previous tile, the A fragments of its P V
  // Each wgmma issue unconditional in its own straight code: ptxas serialized every wgmma of the kernel after one
  // issued under a condition (nvcc 13.0).
  w.convert_q();
  wait_for_tile<Cfg>(smem, 0, 0, group);
  take_turn();
  wgmma_fence();
  w.issue_scores(s, 0);
  pass_turn();
  wgmma_wait<0>();
  pin_registers(s);
  if constexpr (Cfg::kQCodesForHalves) pin_registers(w.q_halves);
  free_codes(0, 0);
  w.template scores_to_probabilities</*kGuessMax=*/true, Cfg::kPrescale>(s, 0, p, lane, a);
  wait_for_values(0, 0);  // landed during the softmax
  int slot = 0;  // tile % kStages, counted rather than divided
  for (int tile = 1; tile < group_tiles; ++tile) {
    const int prev = slot;
    slot = slot + 1 == Cfg::kStages ? 0 : slot + 1;
    w.convert_q();
    wait_for_tile<Cfg>(smem, tile, slot, group);
    if (tile > 1) wait_for_values(tile - 1, prev);
    take_turn();
    wgmma_fence();
    w.issue_scores(s, slot);
    w.issue_output(a, prev);
    pass_turn();
    wgmma_wait<1>();  // S of this tile; P V of the last one still runs during the softmax
    pin_registers(s);
    if constexpr (Cfg::kQCodesForHalves) pin_registers(w.q_halves);  // read by Q K^T until here
    free_codes(tile, slot);
    float correction[2];
    // Waits for the last tile's P V, frees its slot and rescales O for this tile.
    auto finish_output = [&] {
      wgmma_wait<0>();
      pin_registers(a);  // read by that P V until here: no other value may take their registers before
      pin_registers(w.o);
      free_halves(tile - 1, prev);
      rescale_rows(w.o, correction);
    };
    if constexpr (Cfg::kLatePack) {
      w.exponentials(s, tile * kN, p, correction,
                     [&](float (&raw)[kN / 8][4]) { w.recompute_scores(raw, smem, slot, lane); });
      finish_output();
      pack_probabilities(s, a);
    } else {
      typename Cfg::Probabilities next;
      w.template probabilities</*kGuessMax=*/true, Cfg::kPrescale>(s, tile * kN, p, lane, next, correction);
      finish_output();
      replace_fragments(a, next);
    }
  }
  if (group_tiles > 1) wait_for_values(group_tiles - 1, slot);
  take_turn();
  wgmma_fence();
  w.issue_output(a, slot);
  if (group == 0) pass_turn();  // group 1 takes its last turn after this; nobody waits for one more
  wgmma_wait<0>();
  pin_registers(w.o);
  if constexpr (Cfg::kGroupTiles) free_halves(group_tiles - 1, slot);  // otherwise the block's last tile
  w.template store_output<OutT>(p, c, lane);
  if constexpr (Cfg::kGroupTiles) {
    for (int tile = group_tiles; tile < tiles; ++tile) skip_tile(tile);
  }
}

// Blocks from split_from on are split units (WgmmaJob); split_from is the block count when there are none.
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSm)
    attention_wgmma_kernel(const AttentionParams p, const __grid_constant__ WgmmaMaps maps, int split_from) {
#if SDPA_HAS_SM90A
  allow_next_grid_launch();
  const WgmmaJob job = wgmma_job<Cfg>(p, maps.order, split_from);
  if (job.row0 >= p.seqlen_q) return;  // a split unit past the last query row; the whole block leaves
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const WgmmaSmem<Cfg> smem{smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024};
  if (threadIdx.x == 0) {
    for (int bar = 0; bar < Cfg::kMbarriers; ++bar) mbarrier_init(smem.tile_loaded(bar), 1);  // and the others
    fence_mbarrier_init();
  }
  __syncthreads();  // the mbarriers are initialized
  // Launched as a programmatic dependent launch: the kernel before (the quantizer, or the pass of kv_to_half.cu or
  // transpose_values.cu) may still write q, k, v or their copies. Everything above overlaps its tail.
  wait_for_previous_grids();
  const HeadCoords& c = job.c;
  const int tiles = key_tiles(p, c.tile * Cfg::kBlockM, Cfg::kBlockM, Cfg::kBlockN);
  if (threadIdx.x >= Cfg::kConsumerThreads) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    if constexpr (Cfg::kPredecoded) {
      const int tid = threadIdx.x - Cfg::kConsumerThreads;
      if (tid < 32) {
        load_half_tiles<Cfg>(smem, maps, c, p.heads_kv, tiles);
      } else {
        decode_ahead<Cfg::kHeadDim, Cfg::kBlockN, Cfg::kProducerThreads - 32, WgmmaBarriers<Cfg>::kDecodeAhead>(
            maps.plan, maps.k_codes, maps.v_codes, p.heads_kv, p.seqlen_k, smem.ahead_codes(), smem.ahead_loaded(),
            smem.ahead_job(), tid - 32);
      }
    } else if constexpr (Cfg::kValuesByPass) {
      if (threadIdx.x - Cfg::kConsumerThreads < 32) load_code_tiles<Cfg>(smem, maps, job, tiles);
    } else {
      produce_tiles<Cfg>(smem, maps, job, tiles);
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    if constexpr (Cfg::kQInSmem && !Cfg::kQuantizesQRows) decode_q_tile<Cfg>(smem, p, job);
    consume_tiles<Cfg, OutT>(smem, p, job, tiles);
  }
#else
  __trap();  // built for sm_90a only; the host launches it on sm_90 only
#endif
}

// How the TMA reads v: plain [kv_rows][D] boxes, boxes in K's swizzle (for transpose_v_tile), or V^T from
// p.workspace (transpose_values.h) in [D][kv_rows] boxes.
enum class ValuesMap { kPlain, kSwizzled, kTransposed };
// Encodes the TMA descriptors of k and v (attention_wgmma.cu), k swizzled for e4m3 wgmma when `swizzle_k`; fails
// for strides the TMA cannot express.
cudaError_t make_wgmma_maps(const AttentionParams& p, int kv_rows, bool swizzle_k, ValuesMap values,
                            WgmmaMaps* maps);
// Plans the fp16 copies of K and V in p.workspace for a grid of block_m query rows per block (kv_to_half.h),
// enqueues the pass over the first kv heads, and encodes TMA descriptors of the copies, read in 128-byte swizzled
// panels of kv_rows x 64 dims, and of the codes the grid decodes ahead, in plain boxes of kv_rows rows.
cudaError_t predecode_wgmma_kv(const AttentionParams& p, int kv_rows, int block_m, WgmmaMaps* maps,
                               cudaStream_t stream);

// The first block of the split units (WgmmaJob): the query tiles of the last wave, when the units of all of them
// fit in one wave, where each has 1 / groups of the tile's keys. Not causal (that grid runs heaviest first, so its
// last wave is already the cheapest), and only with a key tile for every group. `blocks` when there are none.
int64_t split_tail_from(const AttentionParams& p, int64_t blocks, int groups, int block_n);

template <class Cfg, typename OutT>
cudaError_t launch_wgmma_config(const AttentionParams& p, cudaStream_t stream) {
  if constexpr (!Cfg::kQuantizesQRows && Cfg::kHeadDim <= 128) {
    if (p.q_row_groups) return launch_wgmma_config<typename Cfg::QuantizingQRows, OutT>(p, stream);
  }
  constexpr bool kPredecoded = Cfg::kPredecoded;
  constexpr ValuesMap kValues = Cfg::kValuesByPass ? ValuesMap::kTransposed
                                : Cfg::kFp8Output  ? ValuesMap::kSwizzled
                                                   : ValuesMap::kPlain;
  WgmmaMaps maps;
  cudaError_t err = kPredecoded ? predecode_wgmma_kv(p, Cfg::kBlockN, Cfg::kBlockM, &maps, stream)
                                : make_wgmma_maps(p, Cfg::kBlockN, Cfg::kFp8Scores, kValues, &maps);
  if (err == cudaSuccess && Cfg::kValuesByPass) err = launch_transpose_values(p, stream);
  if (err != cudaSuccess) return err;
  // Causal, all heads go tile by tile in one group (but for the plan's groups when predecoded).
  maps.order = kPredecoded ? maps.plan.order : grid_order(p, query_tiles(p, Cfg::kBlockM), p.batch * p.heads_q);
  const int64_t blocks = attention_blocks(p, Cfg::kBlockM);
  const int64_t split_from = Cfg::kSplitTail ? split_tail_from(p, blocks, Cfg::kConsumerGroups, Cfg::kBlockN) : blocks;
  const int64_t grid = split_from + (blocks - split_from) * Cfg::kConsumerGroups;
  return launch_overlapping(p.overlap_launch, attention_wgmma_kernel<Cfg, OutT>, grid,
                            Cfg::kThreads, Cfg::kSmemBytes, stream, p, maps, static_cast<int>(split_from));
}

template <bool kFp8Scores, bool kPredecoded, int kGroupsAtD64 = 2, bool kFp8Output = false, int kGroupsAtD128 = 2>
struct WgmmaVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    constexpr int kGroups = kHeadDim == 64 ? kGroupsAtD64 : kGroupsAtD128;
    using Cfg = WgmmaConfig<kHeadDim, kFp8Scores, kPredecoded, kGroups, kFp8Output>;
    // `wgmma_fp8+fp8_pv` (128-row blocks) and `wgmma_fp8_m192+fp8_pv` take V^T from the pass where it pays;
    // `wgmma_fp8_m64+fp8_pv` runs where heads are short, and never does.
    if constexpr (kFp8Output && kGroups >= 2) {
      // Blocks of 192 rows are fewer than those of 128: the pass pays for them only where the workspace that
      // transposed_values_workspace_bytes plans for 128-row blocks exists.
      static_assert(Cfg::kBlockM >= kValuesByPassBlockM, "the rows transposed_values_workspace_bytes plans for");
      if (values_by_pass_pays(p, Cfg::kBlockM)) {
        return launch_wgmma_config<WgmmaConfig<kHeadDim, kFp8Scores, kPredecoded, kGroups, kFp8Output, true>, OutT>(
            p, stream);
      }
    }
    return launch_wgmma_config<Cfg, OutT>(p, stream);
  }
};

}  // namespace sdpa
