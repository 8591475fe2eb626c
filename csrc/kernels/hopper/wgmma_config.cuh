// WgmmaConfig: the shape of each Hopper variant's block (consumer groups, tiles, ring, shared memory, registers)
// and why each choice was made (attention_wgmma.cuh describes the variants).
#pragma once

#include <type_traits>

#include "../common/fragment_softmax.cuh"
#include "kv_decode_ahead.cuh"

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

}  // namespace sdpa
