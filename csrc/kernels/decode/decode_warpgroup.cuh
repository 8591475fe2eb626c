// The decode kernel's 64-row blocks on Hopper (variant `decode_wgmma`): the block's four warps are one warpgroup,
// which converts each K/V code tile once into fp16 tiles in shared memory and multiplies them with fp16 wgmma
// (fp32 sums, the full tier's arithmetic).
//
// Why: with mma.sync each of the four warps converts every code of every tile for its own 16 rows. At 16 queries
// (8x32x8x16x32768x128, H100, ncu) that kernel took 396 us against 187 for one query on the same bytes: its ALU
// pipe (the conversions) was 56% busy and its warps mostly stalled on fixed-latency dependencies, with 12 warps
// per SM. Here a code is converted once per block, and wgmma reads each fp16 tile once for all 64 rows: 238.8
// against 329.2 us there in one run, 1.28x the one-query time (graph replay, H100, 2026-11-24; 1.24x with the
// guessed max below).
//
// Loop pass t issues S(t) = Q K^T and the P V of tile t - 1 together, converts tile t + 1 while they run, waits
// for both, runs the softmax of tile t and rescales O; one barrier per pass hands the converted tiles over. Nothing
// stays in flight across loop passes (as in attention_wgmma.cuh: ptxas serializes every wgmma otherwise). A thread
// converts exactly the chunks it copied into the ring, so the ring needs no barrier. Measured on the way (same
// shape): converting in the pass that multiplies, with a ring barrier, 271 us; L2 prefetches 4-16 tiles ahead,
// 286-338 us (worse); per-chunk index math moved out of the loop (~100 of ~470 instructions per warp and tile), 238;
// the softmax guessing that the row max stays (online_softmax_scores), 226.6 against 242.1 in one run. On an H200
// (2026-11-28, ncu, 8x32x8x16x32768x128) the block's four warps issue ~300 instructions per tile at about 6 cycles
// each (stalls per issue: 1.8 fixed-latency dependencies, 1.2 short scoreboard, 0.4 long scoreboard, 0.3 barrier):
// with three warps per SM sub-partition the issue slots are 48% busy, the tensor pipe 41% and DRAM 60%, so what
// sets the pace is each warp's chain, with too few warps to cover it (the registers, 166 a thread, allow three
// blocks). The softmax run beside the last tile's P V (its P into separate fragments, waiting for S alone) did not
// shorten it: 194.4-195.9 us against 193.6-195.4 without (3 alternating rounds), 16x32x8x16x8192x64 4% slower.
// ncu's source counters there put 18% of the warps' stall samples on the conversions' first instructions, waiting
// (short scoreboard) for the shared loads of the codes, V's loads queued behind K's stores. Those waits are off the
// chain: K's and V's chunks loaded together (168 registers, a 4-byte spill) took 192.0-195.2 us against 194.3-195.1,
// and loaded before the wgmma issue 194.0-196.5 (3 alternating rounds, H200, 2026-11-29). Nor is the latency of S:
// S of the next tile issued before this tile's softmax (two S held, 168 registers) took 230.2-234.1 against
// 222.1-224.7 us (3 alternating rounds, H200, 2026-11-29).
// The V tiles are written with the dims of each 16-dim block reordered (even dims, then odd), so that O comes out
// of wgmma in the fragment order of the mma.sync decode warps (output_quad) and shares their epilogue.
#pragma once

#include "../common/tile_rows.cuh"
#include "../hopper/hopper.cuh"
#include "decode_rows.cuh"

namespace sdpa {

// The 16-byte chunks of a [kBlockN][D] code tile that a thread both copies into the ring and converts, so that
// neither hand-over needs a barrier (cp.async.wait_group shows a thread its own copies; it refills a slot only
// after converting it): rows row0 + j * kRowStep, column col. Each 8-thread phase of a 16-byte shared access
// must hit 8 different bank groups: it loads 128 bytes of codes (half rows of opposite panels of rows r and r + 1
// at D = 128, two whole rows at D = 64) and stores chunks of two rows of opposite parity, which the fp16 tiles'
// XOR swizzle puts on different banks (at D = 128 row r's panel 0 beside row r + 1's panel 1).
template <class Cfg>
struct OwnedChunks {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN, kChunksPerRow = kD / 16;
  static constexpr int kRowStep = Cfg::kThreads / kChunksPerRow, kRows = kN / kRowStep;
  static_assert(kD == 64 || kD == 128, "four or eight 16-code chunks per row");
  static_assert(kRowStep % 8 == 0, "the swizzles of both tiles repeat every 8 rows: one offset, then constants");
  // Where the thread's chunks of K or V lie: its first chunk of the next tile to copy (copy() steps it on by a tile
  // each call, as the tiles are copied in order) and the row stride (launch_decode_wgmma keeps strides below 2^24).
  struct Source {
    const uint8_t* next;
    int stride;
  };
  // Offsets of the thread's first chunk, computed once (per chunk and tile, the index math took ~25 of the loop's
  // ~470 instructions per warp and tile, ncu, H100): in a code tile (bytes), in an fp16 tile (halves, its first
  // 8 dims; the next 8 sit at half_offset ^ 8, the neighbouring 16-byte chunk under the XOR swizzle); and the keys
  // of the block (rows past them are zero-filled).
  int row0, code_offset, half_offset, keys;
  Source k, v;

  template <class Rows>
  __device__ OwnedChunks(const Rows& k_rows, const Rows& v_rows) {
    const int t = threadIdx.x, phase = t / 8, i = t % 8;
    row0 = kD == 64 ? t / 4 : phase / 2 * 2 + i / 4;
    const int col = kD == 64 ? t % 4 * 16 : ((i / 4) ^ (phase % 2)) * 64 + i % 4 * 16;
    code_offset = Cfg::Layout::offset(row0, col);
    half_offset = HalfPanelLayout<kN>::offset(row0, col);
    keys = k_rows.seqlen;
    const int k_stride = static_cast<int>(k_rows.row_stride), v_stride = static_cast<int>(v_rows.row_stride);
    k = {k_rows.head + row0 * k_stride + col, k_stride};
    v = {v_rows.head + row0 * v_stride + col, v_stride};
  }

  // Starts the copies of the thread's chunks of tile `tile` of `src`, the tile after the one copied last; keys past
  // `keys` become 0 (their copies name `anywhere`, a valid address, and read nothing). A pointer stepped per tile,
  // not the tile's offset from the head recomputed in 64 bits: about 60 -> 30 instructions per warp and tile for
  // the copies of K and V (sm_90a).
  __device__ void copy(uint8_t* codes, Source& src, int tile, const uint8_t* anywhere) {
    const uint8_t* base = src.next;
    src.next += kN * src.stride;
    const int left = keys - tile * kN - row0;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const bool valid = j * kRowStep < left;
      cp_async_16(codes + code_offset + j * kRowStep * kD, valid ? base + j * kRowStep * src.stride : anywhere,
                  valid);
    }
  }

  // Converts the thread's chunks into an fp16 tile of 64-dim panels (HalfPanelLayout, wgmma's 128-byte swizzle);
  // with kEvenOddDims each 16-dim block holds its even dims, then its odd ones.
  template <bool kEvenOddDims>
  __device__ void convert(const uint8_t* codes, __half* halves) const {
    uint4 chunk[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {  // every load before the first store, which ptxas would keep them behind
      chunk[j] = *reinterpret_cast<const uint4*>(codes + code_offset + j * kRowStep * kD);
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      uint4 c = chunk[j];
      if constexpr (kEvenOddDims) {
        c = make_uint4(__byte_perm(c.x, c.y, 0x6420), __byte_perm(c.z, c.w, 0x6420), __byte_perm(c.x, c.y, 0x7531),
                       __byte_perm(c.z, c.w, 0x7531));
      }
      *reinterpret_cast<uint4*>(halves + half_offset + j * kRowStep * 64) = decode_8(c.x, c.y);
      *reinterpret_cast<uint4*>(halves + (half_offset ^ 8) + j * kRowStep * 64) = decode_8(c.z, c.w);
    }
  }
};

// Starts the copies of the thread's chunks of tile `tile` into its ring slot (none from tile `tiles` on) and
// commits a group either way.
template <class Cfg>
__device__ __forceinline__ void issue_owned_tile(OwnedChunks<Cfg>& own, uint8_t* ring, int tile, int tiles,
                                                 const AttentionParams& p) {
  if (tile < tiles) {
    uint8_t* slot = ring + tile % Cfg::kStages * 2 * Cfg::kTileBytes;
    own.copy(slot, own.k, tile, p.k);
    own.copy(slot + Cfg::kTileBytes, own.v, tile, p.v);
  }
  cp_async_commit();
}

template <class Cfg>
struct DecodeWarpgroup : DecodeRows<Cfg::kHeadDim> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN, kQSteps = kD / 16, kStages = Cfg::kStages;
  static constexpr int kHalfTile = kN * kD;               // halves of an fp16 tile
  static constexpr uint32_t kPanelUnits = kN * 128 / 16;  // a 64-dim panel of a tile, in descriptor units
  static constexpr uint64_t kHigh = descriptor_high(1024, 128);
  static constexpr int kBarrier = 1;  // the named barrier of the block's 128 threads
  using DecodeRows<kD>::o;
  uint32_t q[kQSteps][4];      // fp16 A fragments of the warp's 16 rows
  uint32_t probs[kN / 16][4];  // P of the last tile: the A fragments of its P V, issued with the next S

  __device__ void start(const AttentionParams& p, const DecodeBlock& blk, const uint8_t* stage,
                        const float* row_scale, int lane) {
    this->set_rows(p, blk, row_scale, threadIdx.x / 32, lane);
    this->load_half_q(q, QueryCodes{stage, kD, Cfg::kBlockM}, /*flip_sign=*/false, lane);
  }

  // The block's key loop over `tiles` tiles of the ring, whose first kStages - 1 the caller has issued (the last
  // slot held the staged Q); issue(tile) starts a tile's copies (issue_owned_tile). `halves`: the fp16 tiles,
  // 1024-byte aligned: K of two tiles, then V of three.
  template <class Issue>
  __device__ void run(int tiles, const uint8_t* ring, __half* halves, const OwnedChunks<Cfg>& own, Issue issue,
                      int key0, int lane) {
    auto k_tile = [&](int tile) { return halves + tile % 2 * kHalfTile; };
    auto v_tile = [&](int tile) { return halves + (2 + tile % 3) * kHalfTile; };
    // Tile `tile` into its fp16 tiles, then its slot refilled kStages tiles on. K's tile was last read by the S of
    // tile - 2, V's by the P V of tile - 3: both waited for before the barrier of the last loop pass.
    auto convert = [&](int tile) {
      cp_async_wait<kStages - 1>();
      const uint8_t* slot = ring + tile % kStages * 2 * Cfg::kTileBytes;
      own.template convert<false>(slot, k_tile(tile));
      own.template convert<true>(slot + Cfg::kTileBytes, v_tile(tile));
      issue(tile + kStages);
      fence_proxy_async();  // this thread's fp16 stores before wgmma reads them, after the next barrier
    };
    auto issue_scores = [&](float (&s)[kN / 8][4], int tile) {
      const uint32_t k_desc = descriptor_low(k_tile(tile), 16);
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) {
        wgmma_f16_rs<false>(s, q[ks], kHigh | (k_desc + ks / 4 * kPanelUnits + 2 * (ks % 4)), ks > 0);
      }
      wgmma_commit();
    };
    auto issue_output = [&](int tile) {  // a k16 step is 16 keys of 128-byte panel rows: 128 descriptor units
      const uint32_t v_desc = descriptor_low(v_tile(tile), kPanelUnits * 16);
#pragma unroll
      for (int kt = 0; kt < kN / 16; ++kt) wgmma_f16_rs<true>(o, probs[kt], kHigh | (v_desc + 128 * kt), true);
      wgmma_commit();
    };
    if (tiles == 0) return;
    issue(kStages - 1);  // the slot of the staged Q
    float s[kN / 8][4], correction[2];
    convert(0);
    barrier_sync(kBarrier, Cfg::kThreads);
    wgmma_fence();
    issue_scores(s, 0);
    wgmma_wait<0>();
    pin_registers(s);
    this->template scale_and_mask</*kBranch=*/true>(s, key0, lane);
    // O is still 0: this tile's correction has nothing to rescale.
    online_softmax_scores</*kGuessMax=*/true, Prescale::kNever>(s, this->softmax, 1.0f, probs, correction);
    if (tiles > 1) convert(1);  // after the softmax: beside S, the D = 128 kernel spilled 12 bytes
    barrier_sync(kBarrier, Cfg::kThreads);
    for (int tile = 1; tile < tiles; ++tile) {
      wgmma_fence();
      issue_scores(s, tile);
      issue_output(tile - 1);
      if (tile + 1 < tiles) convert(tile + 1);  // while both run
      wgmma_wait<0>();
      pin_registers(s);
      pin_registers(o);
      pin_registers(probs);
      this->template scale_and_mask</*kBranch=*/true>(s, key0 + tile * kN, lane);
      online_softmax_scores</*kGuessMax=*/true, Prescale::kNever>(s, this->softmax, 1.0f, probs, correction);
      rescale_rows(o, correction);
      barrier_sync(kBarrier, Cfg::kThreads);  // the next tile's fp16 tiles are complete
    }
    wgmma_fence();
    issue_output(tiles - 1);
    wgmma_wait<0>();
    pin_registers(o);
    pin_registers(probs);
  }
};

}  // namespace sdpa
