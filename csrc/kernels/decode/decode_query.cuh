// The decode kernel's Q (attention_decode.cuh): every block stages the E4M3 codes of its packed rows in shared
// memory, since packed rows of different heads do not lie one stride apart, and each row's score scale. q arrives as
// codes, or as fp16/bf16/fp32 values that the block quantizes per query head, bit-identical to quantize_fp8.
//
// Two paths for values. The common one (fp16/bf16, 16-byte aligned rows, blocks of up to 32 rows covering whole
// heads: every Sq = 1 step) loads the block's rows once into registers, before the K/V prologue is requested, so
// that its one round trip heads the memory queue; the amax and the encode then work from registers. The general
// one (a head split between blocks, 64-row blocks, fp32, unaligned rows) reads each head twice, for its amax and
// for its codes. The register path on 64-row blocks took 16 queries from 317.6 to 339.5-359.9 us
// (8x32x8x16x32768x128, H100), which keeps them on the general path.
#pragma once

#include <cstdint>

#include "../common/attention_common.cuh"
#include "../quantize/encode.cuh"
#include "decode_plan.h"

namespace sdpa {

// The scale of q values from their amax: per 16 rows (a group holds a decode head's Sq <= 16 rows) a power of two,
// per head amax / 448 (quantize_fp8's).
__device__ __forceinline__ float q_values_scale(const AttentionParams& p, float amax) {
  return p.q_row_groups ? power_of_two_scale(amax) : scale_from_amax(amax);
}

// Which query head packed row `packed` of kv head `head_kv` is.
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
  // The query head of packed row `row` of the block, and where that head's q_scale is.
  __device__ int head_q(const AttentionParams& p, int row) const { return packed_head_q(p, head_kv, row0 + row); }
  __device__ int q_scale_index(const AttentionParams& p, int row) const { return batch * p.heads_q + head_q(p, row); }
  // The first value of packed row `row` of the block, in elements of its type.
  __device__ int64_t q_offset(const AttentionParams& p, int row) const {
    return q_batch_offset(p) + head_q(p, row) * p.q_head_stride + (row0 + row) % p.seqlen_q * p.q_row_stride;
  }
  __device__ int64_t q_batch_offset(const AttentionParams& p) const { return batch * p.q_batch_stride; }
};

// The block's 16-bit q values held in registers between their load and their encode: 16-byte chunks of 8 values,
// chunk i of the block being row i / kRowChunks, so the chunks of a row sit in kRowChunks consecutive lanes.
template <class Cfg>
struct HeldQuery {
  // Not for 64-row blocks: 4 or 8 held chunks a thread made the D = 64 kernel spill (nvcc 13.0, sm_90).
  static constexpr bool kEnabled = Cfg::kRowGroups < 4;
  static constexpr int kD = Cfg::kHeadDim, kRowChunks = kD / 8;
  static constexpr int kBlockChunks = Cfg::kBlockM * kRowChunks;
  static constexpr int kChunks = kEnabled ? (kBlockChunks + Cfg::kThreads - 1) / Cfg::kThreads : 1;  // per thread
  static_assert(!kEnabled || ((kBlockChunks % Cfg::kThreads == 0 || kChunks == 1) && 32 % kRowChunks == 0),
                "a row's chunks lie in one warp");
  uint4 raw[kChunks];
  bool loaded;  // whether this block took the register path (applies)

  // Whether this block takes the register path: 16-bit values, 16-byte aligned rows, and rows that start and end
  // heads (then a head's amax needs no rows of another block).
  __device__ static bool applies(const AttentionParams& p, const DecodeBlock& blk) {
    const bool half_values = p.q_type == QueryType::kFloat16 || p.q_type == QueryType::kBFloat16;
    const int64_t strides = p.q_batch_stride | p.q_head_stride | p.q_row_stride;
    const bool aligned = (reinterpret_cast<uintptr_t>(p.q) | strides * 2) % 16 == 0;
    return kEnabled && half_values && aligned && blk.row0 % p.seqlen_q == 0 && (blk.row0 + blk.rows) % p.seqlen_q == 0;
  }

  __device__ void load(const AttentionParams& p, const DecodeBlock& blk) {
    loaded = applies(p, blk);
    if (!loaded) return;
    const uint16_t* q = static_cast<const uint16_t*>(static_cast<const void*>(p.q));
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int i = threadIdx.x + c * Cfg::kThreads, row = i / kRowChunks, col = i % kRowChunks * 8;
      const bool real = i < kBlockChunks && row < blk.rows && col < p.q_dims;  // past q_dims: zero (a narrow q)
      raw[c] = real ? *reinterpret_cast<const uint4*>(q + blk.q_offset(p, row) + col) : uint4{};
    }
  }

  // Codes into `stage`, the quantization scale of each row's head into row_scale.
  template <typename T>
  __device__ void encode(const AttentionParams& p, const DecodeBlock& blk, uint8_t* stage, float* row_scale) const {
    __shared__ float row_amax[Cfg::kBlockM];
    float x[kChunks][8];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int i = threadIdx.x + c * Cfg::kThreads, row = i / kRowChunks;
      const T* values = reinterpret_cast<const T*>(&raw[c]);
      float amax = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x[c][e] = to_float(values[e]);
        amax = fmaxf(amax, fabsf(x[c][e]));
      }
      amax = group_max<kRowChunks>(amax);
      if (i < kBlockChunks && i % kRowChunks == 0) row_amax[row] = amax;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int i = threadIdx.x + c * Cfg::kThreads, row = i / kRowChunks, col = i % kRowChunks * 8;
      if (i >= kBlockChunks) break;  // threads past the block's chunks (D = 64, 8 warps) hold none
      float scale = 1.0f;
      if (row < blk.rows) {
        const int head_row0 = row - row % p.seqlen_q;  // the block's rows start a head (applies)
        if (p.q_scale != nullptr) {
          scale = p.q_scale[blk.q_scale_index(p, row)];
        } else {
          float amax = 0.0f;
          for (int r = head_row0; r < head_row0 + p.seqlen_q; ++r) amax = fmaxf(amax, row_amax[r]);
          scale = q_values_scale(p, amax);
        }
        if (col == 0) row_scale[row] = scale;
      }
      store_codes<8>(stage + row * kD + col, x[c], E4m3Divisor(scale, p.q_scale == nullptr));
    }
  }
};

// The general path for values: a warp per head reads its amax over [Sq, D], then each thread encodes 8 values.
template <class Cfg, typename T>
__device__ void stage_query_values(const AttentionParams& p, const DecodeBlock& blk, uint8_t* stage,
                                   float* row_scale) {
  constexpr int kD = Cfg::kHeadDim;
  __shared__ float head_scale[Cfg::kBlockM + 1];  // the block's rows span at most kBlockM + 1 heads
  const int first_head = blk.row0 / p.seqlen_q, heads = (blk.row0 + blk.rows - 1) / p.seqlen_q - first_head + 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto head_values = [&](int head_q) {
    return static_cast<const T*>(static_cast<const void*>(p.q)) + blk.q_batch_offset(p) + head_q * p.q_head_stride;
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
        if (e % kD < p.q_dims) amax = fmaxf(amax, fabsf(to_float(x[e / kD * p.q_row_stride + e % kD])));
      }
      scale = q_values_scale(p, group_max<32>(amax));
    }
    if (lane == 0) head_scale[h] = scale;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Cfg::kBlockM * (kD / 8); i += Cfg::kThreads) {
    const int row = i / (kD / 8), col = i % (kD / 8) * 8;
    float x[8] = {};
    float scale = 1.0f;
    if (row < blk.rows) {
      const T* src = static_cast<const T*>(static_cast<const void*>(p.q)) + blk.q_offset(p, row) + col;
      if (col < p.q_dims) {  // past q_dims: zero (a narrow q)
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = to_float(src[e]);
      }
      scale = head_scale[(blk.row0 + row) / p.seqlen_q - first_head];
      if (col == 0) row_scale[row] = scale;
    }
    store_codes<8>(stage + row * kD + col, x, E4m3Divisor(scale, p.q_scale == nullptr));
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
      codes = *reinterpret_cast<const uint4*>(p.q + blk.q_offset(p, row) + col);
      if (col == 0) row_scale[row] = p.q_scale[blk.q_scale_index(p, row)];
    }
    *reinterpret_cast<uint4*>(stage + row * Cfg::kHeadDim + col) = codes;
  }
}

// Q codes into `stage` and row_scale[row] = q_scale of the row's head * key_scale (k_scale * softmax_scale *
// log2(e)); `held` has loaded the rows it applies to.
template <class Cfg>
__device__ void stage_query(const AttentionParams& p, const DecodeBlock& blk, const HeldQuery<Cfg>& held,
                            float key_scale, uint8_t* stage, float* row_scale) {
  if (held.loaded) {
    if (p.q_type == QueryType::kFloat16) {
      held.template encode<__half>(p, blk, stage, row_scale);
    } else {
      held.template encode<__nv_bfloat16>(p, blk, stage, row_scale);
    }
  } else {
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
  }
  __syncthreads();
  if (threadIdx.x < blk.rows) row_scale[threadIdx.x] *= key_scale;
}

}  // namespace sdpa
