// The mma.sync family of variants (FlashAttention-2 style), one template with three compile-time choices:
//   kStages        cp.async ring depth for K/V (2: `fused_softmax`, 3: `pipe3`)
//   kSwizzle       XOR-swizzled fp16 tiles in shared memory (the `swizzle` toggle)
//   kProducers     0: every warp loads and computes; 1 or 2: dedicated producer warps (`warp_spec`)
//
// Four consumer warps own 16 query rows each (kBlockM = 64); per K/V tile of kBlockN keys a warp does
//   S = Q K^T      mma.sync m16n8k16, Q fragments in registers, K via ldmatrix; S stays in registers
//   m = max(m, rowmax(S)); P = exp2(S - m); l = l * alpha + rowsum(P)   (quad shuffles, fp32)
//   O = O * alpha + P V   P re-packed from the S accumulators into A fragments, V via ldmatrix.trans
// E4M3 codes are decoded to fp16 exactly (every E4M3 value is an fp16 value) and the per-head scales are folded
// into the softmax scale and the epilogue, as in the scalar kernel. P is fp16: the "full" precision tier.
#pragma once

#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"

namespace sdpa {

template <int kHeadDim_, int kStages_, bool kSwizzle_, int kProducers_>
struct MmaConfig {
  static constexpr int kHeadDim = kHeadDim_, kStages = kStages_, kProducers = kProducers_;
  static constexpr bool kSwizzle = kSwizzle_;
  // 32-key tiles at D = 256: a warp's O (128 registers) and Q fragments (64) leave room for 32 keys of S (253-255
  // registers, no spill), and the fp16 K/V rings stay within sm_89's 99 KB (64 KB, pipe3's 80 KB).
  static constexpr int kBlockM = 64, kBlockN = kHeadDim > 128 ? 32 : 64;
  static constexpr int kConsumerWarps = kBlockM / 16;
  static constexpr int kConsumerThreads = kConsumerWarps * 32;
  static constexpr int kThreads = kConsumerThreads + kProducers * 32;
  static constexpr int kTileCodes = kBlockN * kHeadDim;  // bytes of one K or V tile as E4M3 codes
  static constexpr int kTileHalves = kBlockN * kHeadDim;
  // Without producers: a ring of raw code tiles filled by cp.async, plus one decoded fp16 K/V pair.
  // With producers: a ring of decoded fp16 K/V pairs, written by the producers directly.
  using Rows = TileRows<kBlockN, kHeadDim>;
  static constexpr int kSmemBytes = kProducers == 0 ? kStages * 2 * kTileCodes + 2 * kTileHalves * 2
                                                    : kStages * 2 * kTileHalves * 2;
  using Layout = HalfTileLayout<kHeadDim, kSwizzle>;
};

// Per-warp state of the FlashAttention-2 loop: 16 query rows; this lane holds rows g and g + 8 (g = lane / 4).
template <class Cfg>
struct WarpAttention : FragmentRows<Cfg::kHeadDim / 8> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  using FragmentRows<kD / 8>::o;
  using FragmentRows<kD / 8>::row;
  using FragmentRows<kD / 8>::softmax;
  uint32_t q[kD / 16][4];  // A fragments of Q, fp16

  __device__ void consume(const __half* k_tile, const __half* v_tile, int key0, const AttentionParams& p, int lane) {
    using Layout = typename Cfg::Layout;
    const int mat = lane / 8, mat_row = lane % 8;
    float s[kN / 8][4];
    half_tile_scores<Layout>(s, q, k_tile, lane);
    uint32_t probs[kN / 16][4];  // the row max taken first, as in the fp8 family (attention_fp8.cuh)
    this->template scores_to_probabilities</*kGuessMax=*/false>(s, key0, p, lane, probs);
    // O += P V, P of keys [16kt, 16kt + 16) as the A fragment probs[kt].
#pragma unroll
    for (int kt = 0; kt < kN / 16; ++kt) {
#pragma unroll
      for (int dt = 0; dt < kD / 16; ++dt) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_tile + Layout::offset(kt * 16 + (mat % 2) * 8 + mat_row, dt * 16 + (mat / 2) * 8));
        mma_16x8x16(o[2 * dt], probs[kt], b[0], b[1]);
        mma_16x8x16(o[2 * dt + 1], probs[kt], b[2], b[3]);
      }
    }
  }

};

// All threads load (cp.async ring of raw codes), decode the current tile to fp16, and compute.
template <class Cfg>
__device__ __forceinline__ void run_cooperative(WarpAttention<Cfg>& w, unsigned char* smem, typename Cfg::Rows k_rows,
                                                typename Cfg::Rows v_rows, int tiles, const AttentionParams& p,
                                                int lane) {
  using Layout = typename Cfg::Layout;
  uint8_t* ring = smem;  // [kStages][K codes, V codes]
  __half* k_tile = reinterpret_cast<__half*>(smem + Cfg::kStages * 2 * Cfg::kTileCodes);
  __half* v_tile = k_tile + Cfg::kTileHalves;
  auto issue = [&](int tile) {
    if (tile < tiles) {
      uint8_t* stage = ring + (tile % Cfg::kStages) * 2 * Cfg::kTileCodes;
      k_rows.key0 = v_rows.key0 = tile * Cfg::kBlockN;
      copy_tile_async<Cfg::kThreads>(stage, k_rows, threadIdx.x);
      copy_tile_async<Cfg::kThreads>(stage + Cfg::kTileCodes, v_rows, threadIdx.x);
    }
    cp_async_commit();  // an empty group past the end keeps the wait count uniform
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(t);
  for (int tile = 0; tile < tiles; ++tile) {
    issue(tile + Cfg::kStages - 1);
    cp_async_wait<Cfg::kStages - 1>();
    __syncthreads();  // tile's codes are visible to all; everyone is done with the previous fp16 tiles
    const uint8_t* stage = ring + (tile % Cfg::kStages) * 2 * Cfg::kTileCodes;
    for (int ch = threadIdx.x; ch < Cfg::Rows::kChunks; ch += Cfg::kThreads) {
      const int row = k_rows.row(ch), col = k_rows.col(ch), at = DenseCodeLayout<Cfg::kHeadDim>::offset(row, col);
      store_decoded_16<Layout>(k_tile, row, col, *reinterpret_cast<const uint4*>(stage + at));
      store_decoded_16<Layout>(v_tile, row, col, *reinterpret_cast<const uint4*>(stage + Cfg::kTileCodes + at));
    }
    __syncthreads();
    w.consume(k_tile, v_tile, tile * Cfg::kBlockN, p, lane);
  }
}

// The producer/consumer ring of two slots runs on one named barrier that every thread syncs on once per tile: at
// the t-th sync the producer has written tile t and the consumers are done with tile t - 1, whose slot the
// producer fills next with tile t + 1. So the producer stays one tile ahead, as far as two slots allow. (A FULL
// and an EMPTY barrier per slot signalled by bar.arrive order the accesses just as well, but compute-sanitizer
// 2025.3 racecheck misses an arrive's ordering when the waiting side got to the barrier first: ~1500 false
// hazards per ring wrap, also shown by a bare 160-thread arrive/sync ring.)
constexpr int kTileBarrier = 1;

// Producer warps: global codes -> registers -> fp16 -> ring slot.
template <class Cfg>
__device__ __forceinline__ void produce(unsigned char* smem, typename Cfg::Rows k_rows, typename Cfg::Rows v_rows, int tiles) {
  static_assert(Cfg::kStages == 2, "one barrier per tile keeps the producer one tile ahead: two slots");
  using Layout = typename Cfg::Layout;
  const int tid = threadIdx.x - Cfg::kConsumerThreads;
  for (int tile = 0; tile < tiles; ++tile) {
    __half* k_tile = reinterpret_cast<__half*>(smem) + tile % Cfg::kStages * 2 * Cfg::kTileHalves;
    __half* v_tile = k_tile + Cfg::kTileHalves;
    k_rows.key0 = v_rows.key0 = tile * Cfg::kBlockN;
#pragma unroll 4
    for (int ch = tid; ch < Cfg::Rows::kChunks; ch += Cfg::kProducers * 32) {
      const uint4 zero = make_uint4(0, 0, 0, 0);
      const uint4 k_codes = k_rows.valid(ch) ? *reinterpret_cast<const uint4*>(k_rows.src(ch)) : zero;
      const uint4 v_codes = v_rows.valid(ch) ? *reinterpret_cast<const uint4*>(v_rows.src(ch)) : zero;
      store_decoded_16<Layout>(k_tile, k_rows.row(ch), k_rows.col(ch), k_codes);
      store_decoded_16<Layout>(v_tile, v_rows.row(ch), v_rows.col(ch), v_codes);
    }
    barrier_sync(kTileBarrier, Cfg::kThreads);
  }
}

template <class Cfg>
__device__ __forceinline__ void consume_ring(WarpAttention<Cfg>& w, unsigned char* smem, int tiles,
                                             const AttentionParams& p, int lane) {
  for (int tile = 0; tile < tiles; ++tile) {
    barrier_sync(kTileBarrier, Cfg::kThreads);
    const __half* k_tile = reinterpret_cast<const __half*>(smem) + tile % Cfg::kStages * 2 * Cfg::kTileHalves;
    w.consume(k_tile, k_tile + Cfg::kTileHalves, tile * Cfg::kBlockN, p, lane);
  }
}

// minBlocksPerSM = 1 spelled out: with the default, ptxas caps the 160-thread warp_spec block at 128 registers
// and spills (nvcc 13.0); with it, 152 registers and no spill.
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, 1) attention_mma_kernel(const AttentionParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int blocks_per_head = query_tiles(p, Cfg::kBlockM);
  const HeadCoords c = head_coords(p, blocks_per_head);
  const int row0 = c.tile * Cfg::kBlockM;
  const int tiles = key_tiles(p, row0, Cfg::kBlockM, Cfg::kBlockN);
  const typename Cfg::Rows k_rows{k_head(p, c), p.k_row_stride, 0, p.seqlen_k};
  const typename Cfg::Rows v_rows{v_head(p, c), p.v_row_stride, 0, p.seqlen_k};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if constexpr (Cfg::kProducers > 0) {
    if (warp >= Cfg::kConsumerWarps) {
      produce<Cfg>(smem, k_rows, v_rows, tiles);
      return;
    }
  }
  WarpAttention<Cfg> w;
  const bool flip_q = w.start(p, c, row0, warp, lane);
  w.load_half_q(w.q, CallQuery{p, c}, flip_q, lane);
  if constexpr (Cfg::kProducers > 0) {
    consume_ring<Cfg>(w, smem, tiles, p, lane);
  } else {
    run_cooperative<Cfg>(w, smem, k_rows, v_rows, tiles, p, lane);
  }
  w.template store_output<OutT>(p, c, lane);
}

template <int kStages, bool kSwizzle, int kProducers>
struct MmaVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    using Cfg = MmaConfig<kHeadDim, kStages, kSwizzle, kProducers>;
    return launch_with_smem(attention_mma_kernel<Cfg, OutT>, attention_blocks(p, Cfg::kBlockM),
                            Cfg::kThreads, Cfg::kSmemBytes, stream, p);
  }
};

}  // namespace sdpa
