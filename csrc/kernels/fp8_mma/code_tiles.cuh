// The two products of a warp's 16 query rows against a tile of E4M3 K and V codes in shared memory, by mma.sync
// (the fp8_mma family and the decode kernel):
//   S = Q K^T  K by ldmatrix straight on the codes: a row of 16 codes is one b16 row of 8 elements, exactly the
//              bytes of an m16n8k32 B fragment; `mma` multiplies it with the Q fragment of k32 step ks
//   O += P V   V by ldmatrix.trans on the codes, whose registers hold two keys of two dims each: a byte permute and
//              one cvt per pair (split_key_pairs) give the fp16 B fragments of an even-dim and an odd-dim n-tile,
//              so O's n-tiles come in (even, odd) pairs per 16-dim block (output_quad undoes the interleave); with
//              P in E4M3 (code_tile_pv_e4m3) a byte permute of two such registers gives an m16n8k32 B fragment.
#pragma once

#include <cstdint>

#include "../common/ptx.cuh"
#include "../common/split_merge.cuh"
#include "../common/tile_rows.cuh"

namespace sdpa {

// Starts the cp.async copies of K/V tile `tile` into slot `slot` of a [kStages][K codes, V codes] ring (nothing
// from tile `end` on), by thread `thread` of kThreads, then commits a group either way so that the wait count
// stays uniform.
template <class Cfg, int kThreads>
__device__ __forceinline__ void issue_code_tile(uint8_t* ring, typename Cfg::Rows k_rows, typename Cfg::Rows v_rows,
                                               int tile, int end, int slot, int thread) {
  if (tile < end) {
    uint8_t* codes = ring + slot * 2 * Cfg::kTileBytes;
    k_rows.key0 = v_rows.key0 = tile * Cfg::kBlockN;
    copy_tile_async<kThreads, Cfg::kBlockN, Cfg::kHeadDim, typename Cfg::Layout>(codes, k_rows, thread);
    copy_tile_async<kThreads, Cfg::kBlockN, Cfg::kHeadDim, typename Cfg::Layout>(codes + Cfg::kTileBytes, v_rows,
                                                                                  thread);
  }
  cp_async_commit();
}

// S (kN / 8 n-tiles of 8 keys) of the tile's keys; mma(s_tile, ks, b0, b1) adds one k32 step.
template <class Layout, int kD, int kN, class MmaK32>
__device__ __forceinline__ void code_tile_scores(float (&s)[kN / 8][4], const uint8_t* k_tile, int lane, MmaK32 mma) {
  const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kD / 32; ++ks) {
#pragma unroll
    for (int nt = 0; nt < kN / 16; ++nt) {
      uint32_t b[4];  // keys nt*16 + [0, 8) and [8, 16), dims ks*32 + [0, 16) and [16, 32)
      ldmatrix_x4(b, k_tile + Layout::offset(nt * 16 + (mat / 2) * 8 + mat_row, ks * 32 + (mat % 2) * 16));
      mma(s[2 * nt], ks, b[0], b[1]);
      mma(s[2 * nt + 1], ks, b[2], b[3]);
    }
  }
}

// O += P V over the tile's keys, P as fp16 A fragments (probs[kt]: keys [16 kt, 16 kt + 16)).
template <class Layout, int kD, int kN>
__device__ __forceinline__ void code_tile_pv(float (&o)[kD / 8][4], const uint32_t (&probs)[kN / 16][4],
                                             const uint8_t* v_tile, int lane) {
  const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
  for (int kt = 0; kt < kN / 16; ++kt) {
#pragma unroll
    for (int db = 0; db < kD / 32; ++db) {
      uint32_t v[4];  // keys kt*16 + [0, 8), [8, 16) for dims db*32 + [0, 16), then the same for [16, 32)
      ldmatrix_x4_trans(v, v_tile + Layout::offset(kt * 16 + (mat % 2) * 8 + mat_row, db * 32 + (mat / 2) * 16));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t even[2], odd[2];
        split_key_pairs(v[2 * h], &even[0], &odd[0]);
        split_key_pairs(v[2 * h + 1], &even[1], &odd[1]);
        const int block = 2 * db + h;  // 16-dim block
        mma_16x8x16(o[2 * block], probs[kt], even[0], even[1]);
        mma_16x8x16(o[2 * block + 1], probs[kt], odd[0], odd[1]);
      }
    }
  }
}

// O += P V over the tile's keys with P as E4M3 A fragments (pack_probabilities: probs[kt] covers keys [32 kt,
// 32 kt + 32), positions 4c..4c + 3 of each 16 holding keys 2c, 2c + 1, 2c + 8 and 2c + 9) and V codes as m16n8k32
// B fragments. Of code_tile_pv's ldmatrix.trans registers (keys 2c, 2c + 1 of dims 2g, 2g + 1), those of keys 0-7
// and 8-15 of a 16-key group give, by one byte permute, the word of dim 2g at those four positions (bytes 0 and 2 of
// each) or of dim 2g + 1 (bytes 1 and 3): B column g of an even-dim or an odd-dim n-tile, the same (even, odd)
// pairs as code_tile_pv's, so output_quad reads O alike. Per 32 keys and 32 dims a lane issues two ldmatrix, eight
// permutes and four k32 mma, where the fp16 P V converts every pair of codes and issues eight k16 mma.
template <class Layout, int kD, int kN>
__device__ __forceinline__ void code_tile_pv_e4m3(float (&o)[kD / 8][4], const uint32_t (&probs)[kN / 32][4],
                                                  const uint8_t* v_tile, int lane) {
  const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
  for (int kt = 0; kt < kN / 32; ++kt) {
    E4m3Fragment a;
    a.set(probs[kt]);
#pragma unroll
    for (int db = 0; db < kD / 32; ++db) {
      uint32_t v[2][4];  // per 16 keys: keys [0, 8), [8, 16) of dims db*32 + [0, 16), then of [16, 32)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        ldmatrix_x4_trans(v[half], v_tile + Layout::offset(kt * 32 + half * 16 + (mat % 2) * 8 + mat_row,
                                                           db * 32 + (mat / 2) * 16));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int block = 2 * db + h;  // 16-dim block
        mma_16x8x32_e4m3(o[2 * block], a, __byte_perm(v[0][2 * h], v[0][2 * h + 1], kEvenDimKeys),
                         __byte_perm(v[1][2 * h], v[1][2 * h + 1], kEvenDimKeys));
        mma_16x8x32_e4m3(o[2 * block + 1], a, __byte_perm(v[0][2 * h], v[0][2 * h + 1], kOddDimKeys),
                         __byte_perm(v[1][2 * h], v[1][2 * h + 1], kOddDimKeys));
      }
    }
  }
}

// This lane's values of row r (0: row g, 1: row g + 8) at dims 16 block + 4 (lane % 4) + [0, 4): O n-tile pair
// (2 block, 2 block + 1) holds dims 16 block + 4c + {0, 2} and 16 block + 4c + {1, 3}.
template <int kOTiles>
__device__ __forceinline__ float4 output_quad(const float (&o)[kOTiles][4], int r, int block) {
  return make_float4(o[2 * block][2 * r], o[2 * block + 1][2 * r], o[2 * block][2 * r + 1],
                     o[2 * block + 1][2 * r + 1]);
}

// The key loop of a block whose key groups (Cfg::kSplits of them) each stream tiles first, first + kTileStep, ...
// below `last` of the block's `tiles` through a ring of their own: a contiguous share [first, last) with kTileStep 1,
// every kSplits-th tile with kTileStep = kSplits (from first = group, to last = tiles). issue(tile) starts a tile's
// copies, `barrier` syncs the group's `threads`, and consume(slot, tile) multiplies a landed tile. Every group runs
// the same number of rounds (a group with one tile fewer idles through the last), so that all warps pass the same
// sequence of barriers. A round refills the slot the round before read only once its own tile has landed, so one
// barrier per round covers both hand-overs. Requesting the next tile before the wait, with a barrier on each side,
// measured 4.57-4.65 against 4.55-4.63 us at 1x8x512x64 in two runs and 22.66 against 22.43 us at 1x8x512x4096x64
// (fp8_split, H200).
template <class Cfg, int kTileStep = 1, class Issue, class Consume>
__device__ __forceinline__ void run_key_group_rounds(int tiles, int first, int last, const uint8_t* ring, int barrier,
                                                     int threads, Issue issue, Consume consume) {
  const int rounds = (tiles + Cfg::kSplits - 1) / Cfg::kSplits;
  for (int round = 0; round < rounds; ++round) {
    const int tile = first + round * kTileStep;
    cp_async_wait<Cfg::kStages - 2>();
    // The tile's codes are visible to the group's warps, which are done with the slot refilled next.
    barrier_sync(barrier, threads);
    issue(tile + (Cfg::kStages - 1) * kTileStep);
    const uint8_t* slot = ring + round % Cfg::kStages * 2 * Cfg::kTileBytes;
    if (tile < last) consume(slot, tile);
  }
}

// Once every ring is done, each warp's partial rows (its O in output_quad's order, row max and sum) into the shared
// memory the rings held, for merge_partials; returns them.
template <class Cfg, class Softmax, int kOTiles>
__device__ __forceinline__ const float* stage_partials(uint8_t* smem, const Softmax (&softmax)[2],
                                                      const float (&o)[kOTiles][4], int warp, int lane) {
  __syncthreads();  // every ring is done: the partial rows reuse the shared memory
  float* partials = reinterpret_cast<float*>(smem);
  Cfg::Partials::write(partials + warp * Cfg::Partials::kFloats, softmax, lane,
                       [&](int r, int block) { return output_quad(o, r, block); });
  __syncthreads();
  return partials;
}

}  // namespace sdpa
