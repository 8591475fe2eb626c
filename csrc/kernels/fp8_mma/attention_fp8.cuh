// The native-FP8 variants (`fp8_mma`, sm_89 and later): no decode pass through shared memory at all.
//
// K and V tiles arrive as raw E4M3 codes through a cp.async ring into XOR-swizzled shared memory. Per tile a warp
// (16 query rows) does
//   S = Q K^T     mma.sync m16n8k32 e4m3 straight on the codes (code_tiles.cuh), Q fragments from global memory
//                 once
//   softmax       in registers (fragment_softmax.cuh), P in fp16: the "full" precision tier
//   O += P V      mma.sync m16n8k16 fp16 on V codes converted in registers (code_tiles.cuh)
// kWarps sets the query tile (16 rows per warp): fewer rows per block mean more blocks for small batches.
// `fp8_mma+fp8_pv` (kFp8Output, fast tier): P scaled by 2^4 and cast to E4M3, and O += P V by mma.sync m16n8k32
// e4m3 straight on the V codes (code_tile_pv_e4m3), both products on Ada's FP8 tensor cores. On sm_90 ptxas has no
// e4m3 mma.sync, so there, as for Q K^T, it runs as fp16 mma on converted codes (SDPA_E4M3_MMA_AS_FP16): the same
// products and fp32 sums, which is how the tests check it on a Hopper GPU.
#pragma once

#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"
#include "code_tiles.cuh"

namespace sdpa {

template <int kHeadDim_, int kWarps_, int kStages_, bool kFp8Output_ = false>
struct Fp8Config {
  static constexpr int kHeadDim = kHeadDim_, kWarps = kWarps_, kStages = kStages_;
  static constexpr bool kFp8Output = kFp8Output_;
  // E4M3 P is scaled by 2^4 so that most P land among E4M3's normal values (ScaledRowSoftmax).
  using Softmax = ScaledRowSoftmax<kFp8Output ? 4 : 0>;
  // 64-key tiles at D = 64; at D = 128 the 64 O accumulators leave room only for 32 keys of S (64 keys need
  // more than 255 registers and spill).
  static constexpr int kBlockM = 16 * kWarps, kBlockN = kHeadDim == 64 ? 64 : 32, kThreads = 32 * kWarps;
  static constexpr int kTileBytes = kBlockN * kHeadDim;
  static constexpr int kSmemBytes = kStages * 2 * kTileBytes;  // ring of [K codes, V codes]
  using Rows = TileRows<kBlockN, kHeadDim>;
  using Layout = SwizzledCodeLayout<kHeadDim>;
  // P of a tile: fp16 A fragments of k16 steps, or E4M3 ones of k32 steps.
  using Probabilities = std::conditional_t<kFp8Output, uint32_t[kBlockN / 32][4], uint32_t[kBlockN / 16][4]>;
};

// O n-tiles: (even dims, odd dims) per 16-dim block.
template <class Cfg>
struct Fp8WarpAttention : FragmentRows<Cfg::kHeadDim / 8, typename Cfg::Softmax> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  using Base = FragmentRows<kD / 8, typename Cfg::Softmax>;
  using Base::o;
  using Base::row;
  using Base::softmax;
  E4m3Fragment q[kD / 32];  // A fragments of Q (load_code_q)

  __device__ void load_q(const AttentionParams& p, const HeadCoords& c, bool flip_sign, int lane) {
    uint32_t codes[kD / 32][4];
    this->load_code_q(codes, CallQuery{p, c}, flip_sign, lane);
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks) q[ks].set(codes[ks]);
  }

  __device__ void consume(const uint8_t* k_tile, const uint8_t* v_tile, int key0, const AttentionParams& p,
                          int lane) {
    using Layout = typename Cfg::Layout;
    float s[kN / 8][4];
    code_tile_scores<Layout, kD, kN>(s, k_tile, lane, [&](float (&s_tile)[4], int ks, uint32_t b0, uint32_t b1) {
      mma_16x8x32_e4m3(s_tile, q[ks], b0, b1);
    });
    // The row max taken first: guessing it (online_softmax_scores) made fp8_split 4.8 -> 5.1 us at 1x8x512x64
    // (H200), where each warp sees two tiles and the first must take the max anyway.
    typename Cfg::Probabilities probs;
    this->template scores_to_probabilities</*kGuessMax=*/false>(s, key0, p, lane, probs);
    if constexpr (Cfg::kFp8Output) {
      code_tile_pv_e4m3<Layout, kD, kN>(o, probs, v_tile, lane);
    } else {
      code_tile_pv<Layout, kD, kN>(o, probs, v_tile, lane);
    }
  }

  __device__ float4 output_quad(int r, int block) const { return sdpa::output_quad(o, r, block); }

  // Calls store(dim, value) for this lane's values of row r.
  template <typename Store>
  __device__ void for_each_output(int r, int lane, Store store) const {
#pragma unroll
    for (int block = 0; block < kD / 16; ++block) {
      const int dim = block * 16 + 4 * (lane % 4);
      const float4 quad = output_quad(r, block);
      store(dim, quad.x);
      store(dim + 1, quad.y);
      store(dim + 2, quad.z);
      store(dim + 3, quad.w);
    }
  }

  template <typename OutT>
  __device__ void finish(const AttentionParams& p, const HeadCoords& c, int lane) {
    finish_rows<OutT>(softmax, row, p, c, lane, [&](OutT* out, int r, float out_scale) {
      if (out == nullptr) return;
      for_each_output(r, lane, [&](int dim, float value) {
        if (dim < p.out_dims) out[dim] = from_float<OutT>(value * out_scale);
      });
    });
  }
};

// fp8_pv declares one block per SM: on sm_90, where its E4M3 P V runs as fp16 mma, ptxas otherwise stopped at 168
// registers and spilled 4 bytes at D = 128 (182 and no spill with it; sm_89 takes 142-144 either way, nvcc 13.0).
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kFp8Output ? 1 : 0)
    attention_fp8_kernel(const AttentionParams p) {
  extern __shared__ __align__(128) uint8_t ring[];  // [kStages][K codes, V codes], swizzled
  const int blocks_per_head = query_tiles(p, Cfg::kBlockM);
  const HeadCoords c = head_coords(p, blocks_per_head);
  const int row0 = c.tile * Cfg::kBlockM;
  const int tiles = key_tiles(p, row0, Cfg::kBlockM, Cfg::kBlockN);
  const typename Cfg::Rows k_rows{k_head(p, c), p.k_row_stride, 0, p.seqlen_k};
  const typename Cfg::Rows v_rows{v_head(p, c), p.v_row_stride, 0, p.seqlen_k};
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) {
    issue_code_tile<Cfg, Cfg::kThreads>(ring, k_rows, v_rows, t, tiles, t % Cfg::kStages, threadIdx.x);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Fp8WarpAttention<Cfg> w;
  const bool flip_q = w.start(p, c, row0, warp, lane);
  w.load_q(p, c, flip_q, lane);

  for (int tile = 0; tile < tiles; ++tile) {
    __syncthreads();  // every warp is done with the slot the next issue overwrites
    const int next = tile + Cfg::kStages - 1;
    issue_code_tile<Cfg, Cfg::kThreads>(ring, k_rows, v_rows, next, tiles, next % Cfg::kStages, threadIdx.x);
    cp_async_wait<Cfg::kStages - 1>();
    __syncthreads();  // the tile's codes are visible to every warp
    const uint8_t* slot = ring + (tile % Cfg::kStages) * 2 * Cfg::kTileBytes;
    w.consume(slot, slot + Cfg::kTileBytes, tile * Cfg::kBlockN, p, lane);
  }
  // Recomputing the head coordinates here (a few integer ops) keeps them out of registers during the key loop;
  // otherwise ptxas spills them (8 bytes of stack at 168 registers, seen with nvcc 13.0 for sm_90).
  w.template finish<OutT>(p, head_coords(p, blocks_per_head), lane);
}

template <int kWarps, int kStages, bool kFp8Output = false>
struct Fp8Variant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    using Cfg = Fp8Config<kHeadDim, kWarps, kStages, kFp8Output>;
    return launch_with_smem(attention_fp8_kernel<Cfg, OutT>, attention_blocks(p, Cfg::kBlockM),
                            Cfg::kThreads, Cfg::kSmemBytes, stream, p);
  }
};

}  // namespace sdpa
