// `decode`: attention for few query rows against many keys (token generation, speculative decoding, a short chunk
// against a cache), sm_80 and later. Decode is bound by the bytes of K and V, so the kernel reads every code once
// per kv head (the query heads of a kv head share a tile: decode_plan.h), spreads the keys over the whole GPU and
// keeps the tensor cores off the critical path.
//
// Block (kv head, row tile, key split): 4 warps, 16 packed query rows each along the rows (kRowGroups) and the
// rest along the keys (kSplits key groups, each a contiguous share of the block's key range, loaded through its own
// cp.async ring of kStages tiles, as in fp8_split). Per tile a warp does
//   S = Q K^T   m16n8k16 fp16 mma on codes converted in registers (exact products, fp32 sums) on every arch:
//               the e4m3 mma.sync exists only from sm_89, and its sums are not the fp32 ones the full tier promises
//   S *= the scale of each row's query head (q_scale k_scale softmax_scale log2 e), masked per row (the batch's key
//   count, the causal diagonal aligned top-left or bottom-right to that count)
//   softmax in registers, P in fp16; O += P V (code_tiles.cuh)
// then the key groups merge in shared memory (split_merge.cuh). With one key split the block writes out and lse;
// with more it writes partial rows (O / sum * v_scale, lse in log2 units) and decode_combine_kernel merges them.
//
// q arrives as E4M3 codes, or as fp16/bf16/fp32 values that the block quantizes itself per query head, bit-identical
// to quantize_fp8 (the decode step then needs no quantization launch); either way the block stages its Q codes in
// shared memory, since packed rows of different heads do not lie at one stride apart.
#pragma once

#include <cfloat>
#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"
#include "../fp8_mma/code_tiles.cuh"
#include "../quantize/encode.cuh"
#include "decode_plan.h"

namespace sdpa {

template <int kHeadDim_, int kRowGroups_>
struct DecodeConfig {
  static constexpr int kHeadDim = kHeadDim_, kRowGroups = kRowGroups_;
  static constexpr int kThreads = 128, kSplits = kThreads / 32 / kRowGroups;  // key groups of a block
  static constexpr int kGroupThreads = 32 * kRowGroups;
  static constexpr int kBlockM = 16 * kRowGroups;
  // 32-key tiles at D = 128, where the 64 O accumulators leave room for 32 keys of S (as in fp8_mma); 64 at D = 64.
  static constexpr int kBlockN = kHeadDim == 64 ? 64 : 32;
  static constexpr int kTileBytes = kBlockN * kHeadDim;
  // Slots of K + V codes per block: 12 (96 KB, 2 blocks per SM on an H100), 3 stages per group with 4 key groups
  // and 6 with 2; with 64 rows, one key group of 8 stages (64 KB, 3 blocks per SM). 12 slots against 8 for every
  // shape, graph us (H100, 2026-11-24, two runs; the combine kernel changed between them): 32x32x8x4096x128, one
  // split, 97.8 / 108.6; 8x32x8x32768x128 at 16 queries (64 rows) 344.4 / 300.9. The memory-bound rows want bytes
  // in flight, the 64-row blocks more warps to hide the latency of their mma chains.
  static constexpr int kSlots = kRowGroups == 4 ? 8 : 12;
  static constexpr int kStages = kSlots / kSplits;
  static constexpr int kGroupRingBytes = kStages * 2 * kTileBytes;
  static constexpr int kRoundKeys = kSplits * kBlockN;  // keys the block takes per round
  using Partials = SplitPartials<kHeadDim>;
  static constexpr int kSmemBytes = kSplits * kGroupRingBytes;
  static_assert(kSmemBytes >= kThreads / 32 * Partials::kBytes, "the partial rows reuse the rings");
  // The Q codes are staged in key group 0's last ring slot, which the prologue leaves empty.
  static_assert(kBlockM * kHeadDim <= 2 * kTileBytes, "the staged Q fits one ring slot");
  using Rows = TileRows<kBlockN, kHeadDim>;
  using Layout = SwizzledCodeLayout<kHeadDim>;
};

// Which query head and query index packed row `packed` of kv head `head_kv` is.
__device__ __forceinline__ int packed_head_q(const AttentionParams& p, int head_kv, int packed) {
  return head_kv * (p.heads_q / p.heads_kv) + packed / p.seqlen_q;
}

// The query rows of a block: its kv head, first packed row, row count, the batch's keys and its causal offset.
struct DecodeBlock {
  int batch, head_kv, row0, rows, keys, causal_offset;

  // One past the last key that query index `query` sees.
  __device__ int key_end(const AttentionParams& p, int query) const {
    return p.is_causal ? min(keys, max(query + causal_offset + 1, 0)) : keys;
  }
  // One past the last key that any row of the block sees: its rows are consecutive packed rows, so their query
  // indices run from row0 % Sq up, wrapping to 0 at most once unless they cover a whole head.
  __device__ int last_key_end(const AttentionParams& p) const {
    const int first = row0 % p.seqlen_q;
    return key_end(p, first + rows - 1 < p.seqlen_q ? first + rows - 1 : p.seqlen_q - 1);
  }
};

// Stages the block's Q codes in `stage` ([kBlockM][D], rows past the block's zero) and each row's score scale in
// log2 units; values (q_type != kCodes) are quantized per query head first, as quantize_fp8 does.
template <class Cfg, typename T>
__device__ void stage_query_values(const AttentionParams& p, const DecodeBlock& blk, uint8_t* stage,
                                   float* row_scale) {
  constexpr int kD = Cfg::kHeadDim;
  __shared__ float head_scale[Cfg::kBlockM + 1];  // the block's rows span at most kBlockM + 1 heads
  const int first_head = blk.row0 / p.seqlen_q, heads = (blk.row0 + blk.rows - 1) / p.seqlen_q - first_head + 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto head_values = [&](int head_q) {
    return static_cast<const T*>(static_cast<const void*>(p.q)) + blk.batch * p.q_batch_stride +
           head_q * p.q_head_stride;
  };
  for (int h = warp; h < heads; h += Cfg::kThreads / 32) {  // a warp per head: the amax over its [Sq, D]
    const int head_q = blk.head_kv * (p.heads_q / p.heads_kv) + first_head + h;
    float scale;
    if (p.q_scale != nullptr) {
      scale = p.q_scale[blk.batch * p.heads_q + head_q];
    } else {
      const T* x = head_values(head_q);
      float amax = 0.0f;
      for (int e = lane; e < p.seqlen_q * kD; e += 32) {
        amax = fmaxf(amax, fabsf(to_float(x[e / kD * p.q_row_stride + e % kD])));
      }
      scale = scale_from_amax(group_max<32>(amax));
    }
    if (lane == 0) head_scale[h] = scale;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Cfg::kBlockM * (kD / 8); i += Cfg::kThreads) {
    const int row = i / (kD / 8), col = i % (kD / 8) * 8;
    float x[8] = {};
    float scale = 1.0f;
    if (row < blk.rows) {
      const int packed = blk.row0 + row, head_q = packed_head_q(p, blk.head_kv, packed);
      const T* src = head_values(head_q) + packed % p.seqlen_q * p.q_row_stride + col;
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = to_float(src[e]);
      scale = head_scale[packed / p.seqlen_q - first_head];
      if (col == 0) row_scale[row] = scale;
    }
    store_codes<8>(stage + row * kD + col, x, scale);
  }
}

template <class Cfg>
__device__ void stage_query_codes(const AttentionParams& p, const DecodeBlock& blk, uint8_t* stage,
                                  float* row_scale) {
  constexpr int kChunks = Cfg::kHeadDim / 16;
  for (int i = threadIdx.x; i < Cfg::kBlockM * kChunks; i += Cfg::kThreads) {
    const int row = i / kChunks, col = i % kChunks * 16;
    uint4 codes = make_uint4(0u, 0u, 0u, 0u);
    if (row < blk.rows) {
      const int packed = blk.row0 + row, head_q = packed_head_q(p, blk.head_kv, packed);
      codes = *reinterpret_cast<const uint4*>(p.q + blk.batch * p.q_batch_stride + head_q * p.q_head_stride +
                                              packed % p.seqlen_q * p.q_row_stride + col);
      if (col == 0) row_scale[row] = p.q_scale[blk.batch * p.heads_q + head_q];
    }
    *reinterpret_cast<uint4*>(stage + row * Cfg::kHeadDim + col) = codes;
  }
}

// Q codes into `stage` and row_scale[row] = q_scale of the row's head * k_scale * softmax_scale * log2(e).
template <class Cfg>
__device__ void stage_query(const AttentionParams& p, const DecodeBlock& blk, uint8_t* stage, float* row_scale) {
  switch (p.q_type) {
    case QueryType::kCodes:
      stage_query_codes<Cfg>(p, blk, stage, row_scale);
      break;
    case QueryType::kFloat32:
      stage_query_values<Cfg, float>(p, blk, stage, row_scale);
      break;
    case QueryType::kFloat16:
      stage_query_values<Cfg, __half>(p, blk, stage, row_scale);
      break;
    case QueryType::kBFloat16:
      stage_query_values<Cfg, __nv_bfloat16>(p, blk, stage, row_scale);
      break;
  }
  __syncthreads();
  if (threadIdx.x < blk.rows) {
    row_scale[threadIdx.x] *= p.k_scale[blk.batch * p.heads_kv + blk.head_kv] * p.softmax_scale * kLog2e;
  }
}

// A warp's 16 packed rows: Q as fp16 fragments of its codes, O, the running max and sum, and per row the score
// scale and the keys it sees.
template <class Cfg>
struct DecodeWarp : FragmentRows<Cfg::kHeadDim / 8> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  using FragmentRows<kD / 8>::o;
  using FragmentRows<kD / 8>::row;
  using FragmentRows<kD / 8>::softmax;
  E4m3HalfFragment q[kD / 32];
  float scale[2];    // rows g and g + 8: score scale in log2 units
  int key_end[2];    // and one past the last key each sees
  int min_key_end;   // the smallest over the warp: tiles below it need no mask

  __device__ void start(const AttentionParams& p, const DecodeBlock& blk, const uint8_t* stage,
                        const float* row_scale, int row_group, int lane) {
    row[0] = row_group * 16 + lane / 4;
    row[1] = row[0] + 8;
    uint32_t codes[kD / 32][4];
    this->load_code_q(codes, stage, kD, Cfg::kBlockM, /*flip_sign=*/false, lane);
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks) q[ks].set(codes[ks]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool real = row[r] < blk.rows;
      scale[r] = real ? row_scale[row[r]] : 0.0f;
      key_end[r] = real ? blk.key_end(p, (blk.row0 + row[r]) % p.seqlen_q) : 0;
    }
    min_key_end = __reduce_min_sync(0xFFFFFFFFu, min(key_end[0], key_end[1]));
  }

  __device__ void consume(const uint8_t* k_tile, const uint8_t* v_tile, int key0, int lane) {
    using Layout = typename Cfg::Layout;
    float s[kN / 8][4];
    code_tile_scores<Layout, kD, kN>(s, k_tile, lane, [&](float (&s_tile)[4], int ks, uint32_t b0, uint32_t b1) {
      mma_16x8x32_e4m3_as_half(s_tile, q[ks].lo, q[ks].hi, b0, b1);
    });
    const bool masked = key0 + kN > min_key_end;
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + nt * 8 + 2 * (lane % 4) + i % 2;
        s[nt][i] = masked && key >= key_end[i / 2] ? -INFINITY : s[nt][i] * scale[i / 2];
      }
    }
    uint32_t probs[kN / 16][4];
    float correction[2];
    online_softmax_scores</*kGuessMax=*/false>(s, softmax, 1.0f, probs, correction);
    rescale_rows(o, correction);
    code_tile_pv<Layout, kD, kN>(o, probs, v_tile, lane);
  }
};

// Where the partial rows of key split `split` go in the workspace (splits > 1): O [splits][rows][D], then lse
// [splits][rows], float32.
template <int kHeadDim>
__host__ __device__ __forceinline__ float* partial_o(void* workspace, const DecodePlan& plan, int split,
                                                     int64_t row) {
  return static_cast<float*>(workspace) + (split * plan.rows + row) * kHeadDim;
}
template <int kHeadDim>
__host__ __device__ __forceinline__ float* partial_lse(void* workspace, const DecodePlan& plan, int split,
                                                       int64_t row) {
  return static_cast<float*>(workspace) + plan.splits * plan.rows * kHeadDim + split * plan.rows + row;
}

template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads) decode_attention_kernel(const AttentionParams p,
                                                                         const DecodePlan plan) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float row_scale[Cfg::kBlockM];
  constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int key_group = warp / Cfg::kRowGroups, row_group = warp % Cfg::kRowGroups;
  DecodeBlock blk;
  const int head = blockIdx.y / plan.row_tiles;  // batch * heads_kv + kv head
  blk.batch = head / p.heads_kv;
  blk.head_kv = head % p.heads_kv;
  blk.row0 = blockIdx.y % plan.row_tiles * Cfg::kBlockM;
  blk.rows = min(Cfg::kBlockM, decode_packed_rows(p) - blk.row0);
  allow_next_grid_launch();
  wait_for_previous_grids();  // above is index math; K and V may come from the kernel before (a cache append)
  blk.keys = p.seqlens_k == nullptr ? p.seqlen_k : min(max(p.seqlens_k[blk.batch], 0), p.seqlen_k);
  blk.causal_offset = p.seqlens_k != nullptr && p.causal_bottom_right ? blk.keys - p.seqlen_q : p.causal_offset;

  // The block's keys [key0, key0 + keys_per_split), cut at what its rows see; key group g takes a contiguous share.
  const int key0 = blockIdx.x * plan.keys_per_split;
  const int block_keys = max(0, min(blk.last_key_end(p), key0 + plan.keys_per_split) - key0);
  const int tiles = (block_keys + kN - 1) / kN;
  const int first = key_group * tiles / Cfg::kSplits, last = (key_group + 1) * tiles / Cfg::kSplits;
  const int64_t head_k = blk.batch * p.k_batch_stride + blk.head_kv * p.k_head_stride + key0 * p.k_row_stride;
  const int64_t head_v = blk.batch * p.v_batch_stride + blk.head_kv * p.v_head_stride + key0 * p.v_row_stride;
  // Rows past the batch's keys are zero-filled: a cache's unused rows may hold any bytes, NaN codes included.
  const typename Cfg::Rows k_rows{p.k + head_k, p.k_row_stride, 0, blk.keys - key0};
  const typename Cfg::Rows v_rows{p.v + head_v, p.v_row_stride, 0, blk.keys - key0};
  uint8_t* ring = smem + key_group * Cfg::kGroupRingBytes;
  const int group_thread = threadIdx.x % Cfg::kGroupThreads, group_barrier = 1 + key_group;
  auto issue = [&](int tile) {
    issue_code_tile<Cfg, Cfg::kGroupThreads>(ring, k_rows, v_rows, tile, last, (tile - first) % Cfg::kStages,
                                            group_thread);
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(first + t);

  uint8_t* stage = smem + (Cfg::kStages - 1) * 2 * Cfg::kTileBytes;
  stage_query<Cfg>(p, blk, stage, row_scale);
  __syncthreads();
  DecodeWarp<Cfg> w;
  w.start(p, blk, stage, row_scale, row_group, lane);
  __syncthreads();  // the stage is free for key group 0's first refill

  run_key_group_rounds<Cfg>(tiles, first, last, ring, group_barrier, Cfg::kGroupThreads, issue,
                            [&](const uint8_t* slot, int tile) {
                              w.consume(slot, slot + Cfg::kTileBytes, key0 + tile * kN, lane);
                            });
  const float* partials = stage_partials<Cfg>(smem, w.softmax, w.o, warp, lane);
  const float v_scale = p.v_scale[blk.batch * p.heads_kv + blk.head_kv];
  merge_partials<Cfg>(partials, blk.rows, [&](int row, int dim0, const float (&value)[8], float m, float sum) {
    const int packed = blk.row0 + row, head_q = packed_head_q(p, blk.head_kv, packed), query = packed % p.seqlen_q;
    const bool seen = sum > 0.0f;  // the row max has P = 1, so a row that saw a key has sum >= 1
    const float out_scale = seen ? __fdividef(v_scale, sum) : 0.0f;
    const float lse_log2 = seen ? m + __log2f(sum) : -INFINITY;
    if (plan.splits == 1) {
      const HeadCoords c{blk.batch, head_q, blk.head_kv, 0};
      store_outputs(out_row<OutT>(p, c, query) + dim0, value, out_scale);
      if (dim0 == 0) lse_of(p, c, query) = lse_log2 * kLn2;
      return;
    }
    const int64_t flat = (static_cast<int64_t>(blk.batch) * p.heads_q + head_q) * p.seqlen_q + query;
    float* dst = partial_o<kD>(p.workspace, plan, blockIdx.x, flat) + dim0;
    *reinterpret_cast<float4*>(dst) =
        make_float4(value[0] * out_scale, value[1] * out_scale, value[2] * out_scale, value[3] * out_scale);
    *reinterpret_cast<float4*>(dst + 4) =
        make_float4(value[4] * out_scale, value[5] * out_scale, value[6] * out_scale, value[7] * out_scale);
    if (dim0 == 0) *partial_lse<kD>(p.workspace, plan, blockIdx.x, flat) = lse_log2;
  });
}

constexpr int kCombineWarps = 8;
constexpr int kCombineBatch = 4;  // splits whose loads a warp issues before it uses any

// Merges the key splits of a row (a block per row): out = sum_s w_s O_s / sum_s w_s with w_s = 2^(lse_s - max lse),
// lse = max + log2(sum w_s); a row that no split saw is 0 with lse -inf. Warp w takes splits w, w + 8, ..., a lane
// kHeadDim / 32 dims of each, kCombineBatch splits' loads in flight at a time, and warp 0 adds up the warps. Its
// loads wait on L2 latency, not bandwidth: a warp per row walking the splits one after the other took 11 us of a
// 104 us call at 1x32x8x131072x128 (32 splits, 32 rows: 32 warps on the whole GPU; ncu, H100).
template <int kHeadDim, typename OutT>
__global__ void __launch_bounds__(32 * kCombineWarps) decode_combine_kernel(const AttentionParams p,
                                                                          const DecodePlan plan) {
  constexpr int kDims = kHeadDim / 32;
  using Dims = std::conditional_t<kDims == 4, float4, float2>;
  __shared__ float warp_values[kCombineWarps][kHeadDim];
  __shared__ float warp_max[kCombineWarps], warp_sum[kCombineWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x;
  allow_next_grid_launch();
  wait_for_previous_grids();  // the partial rows come from the kernel before
  float m = -INFINITY;
  for (int s = threadIdx.x; s < plan.splits; s += 32 * kCombineWarps) {
    m = fmaxf(m, *partial_lse<kHeadDim>(p.workspace, plan, s, row));
  }
  m = group_max<32>(m);
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) m = fmaxf(m, warp_max[w]);
  float sum = 0.0f, value[kDims] = {};
  if (m != -INFINITY) {
    for (int s0 = warp; s0 < plan.splits; s0 += kCombineWarps * kCombineBatch) {
      float lse[kCombineBatch];
      Dims o[kCombineBatch];
#pragma unroll
      for (int j = 0; j < kCombineBatch; ++j) {
        const int s = s0 + j * kCombineWarps;
        lse[j] = s < plan.splits ? *partial_lse<kHeadDim>(p.workspace, plan, s, row) : -INFINITY;
        o[j] = s < plan.splits ? reinterpret_cast<const Dims*>(partial_o<kHeadDim>(p.workspace, plan, s, row))[lane]
                               : Dims{};
      }
#pragma unroll
      for (int j = 0; j < kCombineBatch; ++j) {
        const float w = fast_exp2(lse[j] - m);  // 0 for a split that saw no key of the row, or none at all
        const float* x = reinterpret_cast<const float*>(&o[j]);
        sum += w;
#pragma unroll
        for (int e = 0; e < kDims; ++e) value[e] += w * x[e];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kDims; ++e) warp_values[warp][lane * kDims + e] = value[e];
  if (lane == 0) warp_sum[warp] = sum;
  __syncthreads();
  if (warp != 0) return;
  sum = 0.0f;
  float total[kDims] = {};
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) {
    sum += warp_sum[w];
#pragma unroll
    for (int e = 0; e < kDims; ++e) total[e] += warp_values[w][lane * kDims + e];
  }
  const int query = static_cast<int>(row % p.seqlen_q), head_q = static_cast<int>(row / p.seqlen_q % p.heads_q);
  const HeadCoords c{static_cast<int>(row / p.seqlen_q / p.heads_q), head_q, 0, 0};
  const float out_scale = sum > 0.0f ? 1.0f / sum : 0.0f;
  OutT* out = out_row<OutT>(p, c, query) + lane * kDims;
#pragma unroll
  for (int e = 0; e < kDims; e += 2) {
    const float pair[2] = {total[e], total[e + 1]};
    store_outputs(out + e, pair, out_scale);
  }
  if (lane == 0) lse_of(p, c, query) = sum > 0.0f ? (m + log2f(sum)) * kLn2 : -INFINITY;
}

}  // namespace sdpa
