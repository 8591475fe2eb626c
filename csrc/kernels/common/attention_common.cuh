// Small device helpers shared by the attention kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "params.h"

namespace sdpa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Writes kCount consecutive outputs value * scale: one store of all of them where `out` is aligned to their size
// (rows only need a contiguous last dim, so a row may start anywhere), else one store each.
template <int kCount, typename OutT>
__device__ __forceinline__ void store_outputs(OutT* out, const float (&value)[kCount], float scale) {
  static_assert(kCount == 2 || kCount == 8, "4- or 16-byte stores");
  using Vector = std::conditional_t<kCount == 8, uint4, uint32_t>;
  OutT packed[kCount];
#pragma unroll
  for (int e = 0; e < kCount; ++e) packed[e] = from_float<OutT>(value[e] * scale);
  if (reinterpret_cast<uintptr_t>(out) % sizeof(Vector) == 0) {
    *reinterpret_cast<Vector*>(out) = *reinterpret_cast<const Vector*>(packed);
  } else {
#pragma unroll
    for (int e = 0; e < kCount; ++e) out[e] = packed[e];
  }
}

// Two outputs as one word, the lower at the lower address.
template <typename OutT>
__device__ __forceinline__ uint32_t pack_outputs(float lo, float hi) {
  const OutT packed[2] = {from_float<OutT>(lo), from_float<OutT>(hi)};
  uint32_t word;
  memcpy(&word, packed, sizeof(word));
  return word;
}

// Transposes 4 words across the 4 lanes of a quad (lanes 4q .. 4q + 3): afterwards word j of lane c holds what
// word c of lane j held. Two butterfly steps, each trading one bit of the word index for the same bit of the lane
// index with the partner lane: 4 shuffles, no register array indexed at run time.
__device__ __forceinline__ void transpose_quad(uint32_t (&w)[4], int lane) {
#pragma unroll
  for (int bit = 1; bit <= 2; bit *= 2) {
    const bool upper = lane & bit;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j & bit) continue;
      // Lane c keeps the word whose index bit equals its own and trades the other for the partner's.
      const uint32_t received = __shfl_xor_sync(0xFFFFFFFFu, upper ? w[j] : w[j | bit], bit);
      (upper ? w[j] : w[j | bit]) = received;
    }
  }
}

// Max / sum over groups of kWidth consecutive lanes (kWidth a power of two <= 32).
template <int kWidth>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, offset));
  return x;
}
template <int kWidth>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, offset);
  return x;
}

// Which (batch, query head, kv head) and query tile a block works on.
struct HeadCoords {
  int batch, head_q, head_kv, tile;
};
__device__ __forceinline__ HeadCoords coords_of(const AttentionParams& p, int head, int tile) {
  HeadCoords c;
  c.tile = tile;
  c.head_q = head % p.heads_q;
  c.batch = head / p.heads_q;
  c.head_kv = c.head_q / (p.heads_q / p.heads_kv);
  return c;
}
// Where the block's (batch, head) starts in each tensor: the first Q code of its query head, the first K and V
// codes and the v_scale of its kv head, and row `row` of its query head in out and lse.
__device__ __forceinline__ const uint8_t* q_head(const AttentionParams& p, const HeadCoords& c) {
  return p.q + c.batch * p.q_batch_stride + c.head_q * p.q_head_stride;
}
__device__ __forceinline__ const uint8_t* k_head(const AttentionParams& p, const HeadCoords& c) {
  return p.k + c.batch * p.k_batch_stride + c.head_kv * p.k_head_stride;
}
__device__ __forceinline__ const uint8_t* v_head(const AttentionParams& p, const HeadCoords& c) {
  return p.v + c.batch * p.v_batch_stride + c.head_kv * p.v_head_stride;
}
__device__ __forceinline__ float v_scale_of(const AttentionParams& p, const HeadCoords& c) {
  return p.v_scale[c.batch * p.heads_kv + c.head_kv];
}
template <typename OutT>
__device__ __forceinline__ OutT* out_row(const AttentionParams& p, const HeadCoords& c, int row) {
  return static_cast<OutT*>(p.out) + c.batch * p.out_batch_stride + c.head_q * p.out_head_stride +
         row * p.out_row_stride;
}
__device__ __forceinline__ float& lse_of(const AttentionParams& p, const HeadCoords& c, int row) {
  return p.lse[c.batch * p.lse_batch_stride + c.head_q * p.lse_head_stride + row * p.lse_row_stride];
}
// Query tiles of `block_m` rows per head, and the grid of one block per tile of every (batch, head).
__host__ __device__ __forceinline__ int query_tiles(const AttentionParams& p, int block_m) {
  return (p.seqlen_q + block_m - 1) / block_m;
}
inline int64_t attention_blocks(const AttentionParams& p, int block_m) {
  return static_cast<int64_t>(query_tiles(p, block_m)) * p.batch * p.heads_q;
}
// Flat block index -> coordinates, with `blocks_per_head` query tiles per head: the tiles of one head are
// consecutive blocks.
__device__ __forceinline__ HeadCoords head_coords(const AttentionParams& p, int blocks_per_head) {
  return coords_of(p, blockIdx.x / blocks_per_head, blockIdx.x % blocks_per_head);
}

// The largest key index + 1 that any query row in [row0, row0 + rows) may attend to.
__device__ __forceinline__ int key_end(const AttentionParams& p, int row0, int rows) {
  return p.is_causal ? min(p.seqlen_k, row0 + rows + p.causal_offset) : p.seqlen_k;
}
// Whether query row `query` sees key `key`: inside the keys, and on or below the (shifted) causal diagonal.
__device__ __forceinline__ bool key_visible(const AttentionParams& p, int key, int query) {
  return key < p.seqlen_k && (!p.is_causal || key <= query + p.causal_offset);
}

// The key tiles of block_n keys that query rows [row0, row0 + rows) attend to, for row0 < seqlen_q (a block's
// own tile of the grid); key_tiles_of_rows also for rows past seqlen_q, which attend to none.
__device__ __forceinline__ int key_tiles(const AttentionParams& p, int row0, int rows, int block_n) {
  return (key_end(p, row0, rows) + block_n - 1) / block_n;
}
__device__ __forceinline__ int key_tiles_of_rows(const AttentionParams& p, int row0, int rows, int block_n) {
  return row0 < p.seqlen_q ? key_tiles(p, row0, rows, block_n) : 0;
}

// 2^x in one MUFU instruction (exp2f adds a range fix-up for results below 2^-126, which P never needs).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online-softmax state of one query row, in log2 units: scores are pre-multiplied by scale * log2(e).
// P = exp2(score - max + kScaleLog2): kernels that cast P to E4M3 (largest value 448) scale it by 2^kScaleLog2, so
// that the P of most keys lands among E4M3's normal values (from 2^-6) rather than its subnormals; out (O over the
// sum of the same P) is unchanged and lse takes the scale back out.
template <int kScaleLog2>
struct ScaledRowSoftmax {
  // The running max moves only when a tile's max exceeds it by more than kMaxSlack: after the first tiles most
  // leave it, and so the O accumulators, alone (correction 1). P then stays below 2^(kMaxSlack + kScaleLog2) =
  // 256, where fp16 is exactly as precise as below 1 and E4M3 has room; O and the sum stay consistent with `max`,
  // so out and lse are the same softmax.
  static constexpr float kMaxSlack = 8.0f - kScaleLog2;
  static constexpr float kMaxProbability = 256.0f;  // P of a tile that keeps the max
  float max = -INFINITY;
  float sum = 0.0f;

  // The exp2 offset of a row whose max is `row_max`: P = exp2(score - offset). Rounded once the max passes 2^26
  // (ulp 8), so that whatever weighs one row's P against another's (the correction below, the merges of split
  // partials) takes differences of offsets, not of maxima.
  __device__ __forceinline__ static float offset_of(float row_max) { return row_max - kScaleLog2; }
  // The exp2 offset of a tile that keeps the max (a row with a max).
  __device__ __forceinline__ float offset() const { return offset_of(max); }
  // Folds in a tile whose row maximum is tile_max; returns the factor that rescales the old accumulator
  // and the offset that the tile's exp2 arguments subtract. A row with nothing visible yet keeps max = -inf
  // and a finite offset, so exp2(-inf - offset) = 0 instead of NaN. The test takes the difference of the maxima,
  // exact where they are close: max + kMaxSlack rounds once max passes 2^26 (ulp 8), and let a max 16 above the
  // old one through from 2^27, P = 2^16, inf in fp16.
  __device__ __forceinline__ float rescale(float tile_max, float* offset) {
    if (!(tile_max - max > kMaxSlack)) {
      *offset = max == -INFINITY ? -kScaleLog2 : this->offset();
      return 1.0f;
    }
    const float correction = exp2f(this->offset() - offset_of(tile_max));
    max = tile_max;
    *offset = this->offset();
    sum *= correction;
    return correction;
  }
  // Natural-log logsumexp of the row's scaled scores.
  __device__ __forceinline__ float lse() const { return (max - kScaleLog2 + log2f(sum)) * kLn2; }
};
using RowSoftmax = ScaledRowSoftmax<0>;

// Sets the dynamic shared memory limit of `kernel` and launches it on `grid` with the given arguments; with
// `overlap` (sm_90 only) as a programmatic dependent launch: the kernel's blocks may start while the previous
// kernel on the stream finishes, so the kernel must call wait_for_previous_grids() (ptx.cuh) before its first
// global memory access that can depend on that kernel.
template <typename Kernel, typename... Args>
cudaError_t launch_overlapping(bool overlap, Kernel kernel, dim3 grid, int threads, int smem_bytes,
                               cudaStream_t stream, const Args&... args) {
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
      err != cudaSuccess) {
    return err;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute programmatic;
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &programmatic;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// launch_overlapping without the overlap.
template <typename Kernel, typename... Args>
cudaError_t launch_with_smem(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream,
                             const Args&... args) {
  return launch_overlapping(false, kernel, grid, threads, smem_bytes, stream, args...);
}

}  // namespace sdpa
