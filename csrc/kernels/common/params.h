// Plain parameter structs passed by value to the kernels. No torch types: csrc/kernels compiles with nvcc alone.
#pragma once

#include <cstdint>

// Small functions that both the host and the kernels call.
#if defined(__CUDACC__)
#define SDPA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SDPA_HOST_DEVICE inline
#endif

namespace sdpa {

enum class OutputType : int { kFloat16 = 0, kBFloat16 = 1 };

// Head dims: every variant takes 64 and 128; the scalar, mma.sync and decode families also take kWideHeadDim.
constexpr int kWideHeadDim = 256;

// How q reaches the kernel: E4M3 codes with q_scale, or values that the kernel quantizes itself: per head (only the
// decode variant; the host quantizes q for every other variant) or, with q_row_groups, fp16 / bf16 values in groups
// of 16 rows (the Hopper kernels; attention_variant_quantizes_q).
enum class QueryType : int { kCodes = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3 };

// One attention call. Strides are in elements (one byte for E4M3 codes); the last dim is contiguous.
struct AttentionParams {
  const uint8_t* q;  // [B, Hq, Sq, D] E4M3 codes, or values of q_type (QueryType)
  const uint8_t* k;  // [B, Hkv, Sk, D]
  const uint8_t* v;  // [B, Hkv, Sk, D]
  const float* q_scale;  // [B, Hq], contiguous; for float q the given scale, or null to take amax / 448
  const float* k_scale;  // [B, Hkv], contiguous
  const float* v_scale;  // [B, Hkv], contiguous
  void* out;             // [B, Hq, Sq, D] fp16 or bf16
  float* lse;            // [B, Hq, Sq]
  const int* seqlens_k;  // [B] keys in use per batch (clamped to [0, seqlen_k]), or null: all seqlen_k
  void* workspace;       // attention_workspace_bytes(variant, params) bytes of scratch (launch.h), or null

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t out_batch_stride, out_head_stride, out_row_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  // Dims of each output row written: head_dim, or its first out_dims (a multiple of 8) where v's dims were
  // zero-padded to a kernel head dim and the rest of the output would be zeros cut off (fp8_forward_into).
  int out_dims;
  // Dims of each row of a q of values that the kernel quantizes (q_row_groups): head_dim, or fewer (a multiple of 8)
  // where k and v were zero-padded to a kernel head dim: the dims past q_dims read as 0 (narrow_query in checks.h).
  int q_dims;
  float softmax_scale;  // multiplies q.k of the dequantized inputs
  bool is_causal;       // query i sees keys j <= i + causal_offset
  // 0: top-left aligned (torch's is_causal). Bottom-right alignment (query i of Sq sees keys j <= i + Sk - Sq) is
  // seqlen_k - seqlen_q, which the host keeps >= 0 for every variant but decode; with seqlens_k only decode runs,
  // and it aligns each batch to its own length (causal_bottom_right).
  int causal_offset;
  bool causal_bottom_right;
  QueryType q_type;
  // q of fp16 / bf16 values quantized by the kernel with one scale per 16 rows of a head, rows 16 g ... 16 g + 15
  // (q_quantization="per_16_rows"): amax / 448 of those rows rounded up to a power of two (power_of_two_scale).
  bool q_row_groups;
  bool overlap_launch;  // programmatic dependent launch allowed (sm_90): see launch_overlapping
  OutputType out_type;
};

enum class InputType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// One per-head quantization call: x [B, H, S, D] (any strides) -> codes [B, H, S, D] contiguous.
struct QuantizeParams {
  const void* x;
  InputType x_type;
  int64_t x_batch_stride, x_head_stride, x_row_stride, x_col_stride;
  int batch, heads, rows, cols;
  uint8_t* codes;
  // The codes' row length: cols, or more where the head dim is zero-padded for the attention kernels (the codes past
  // cols are 0); 0 reads as cols.
  int codes_cols;
  float* scale;              // [B, H] out
  const float* given_scale;  // [B, H] or nullptr: derive the scale from amax
  float* partial_amax;       // [B * H, chunks] scratch, written by the amax pass
  // Smoothing (keys): with `shift` set, x is quantized minus its per-channel mean over the rows, written to shift
  // [B * H, cols]; the amax pass then writes each chunk's per-channel sum, min and max to partial_stats
  // [B * H, chunks, 3, cols]. Kernels take it for vectorized rows whose cols / (values per 16 bytes) is a power of
  // two up to 32 (smoothable_row).
  float* shift;
  float* partial_stats;
  int chunks;                // blocks per head in each pass
  bool vectorized;           // contiguous rows whose length and strides are multiples of 16 bytes
};

// Whether the kernels smooth rows of vectors_per_row 16-byte vectors (QuantizeParams::shift): a power of two up to
// 32, so that every vector a thread of a block (a multiple of 32 threads) sees starts at the same column.
SDPA_HOST_DEVICE constexpr bool smoothable_row(int vectors_per_row) {
  return vectors_per_row >= 1 && vectors_per_row <= 32 && (vectors_per_row & (vectors_per_row - 1)) == 0;
}

// Up to three tensors (q, k, v) quantized by one launch of the whole-head kernel.
struct QuantizeHeadsParams {
  QuantizeParams tensors[3];
  int count;
  int first_block[4];  // block index where each tensor's heads start; first_block[count] = total blocks
  bool vectorized;     // every tensor is (QuantizeParams::vectorized)
  int stats_offset;    // where the smoothing statistics start in the whole-head kernel's shared memory (bytes)
};

// New rows of K and V encoded into preallocated E4M3 caches (sdpa::kv_cache_append): row t of batch b goes to cache
// row start[b] + t, as code((k - k_shift) / k_scale) and code(v / v_scale); rows past the cache's end are dropped.
struct KvAppendParams {
  const void* k;  // [B, H, T, D] values of `type`
  const void* v;
  InputType type;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  uint8_t* k_cache;  // [B, H, capacity, D] codes
  uint8_t* v_cache;
  int64_t kc_batch_stride, kc_head_stride, kc_row_stride;
  int64_t vc_batch_stride, vc_head_stride, vc_row_stride;
  const float* k_scale;  // [B, H] contiguous
  const float* v_scale;
  const float* k_shift;  // [B, H, D] contiguous, or null
  const int* start;      // [B]
  int batch, heads, rows, head_dim, capacity;
};

}  // namespace sdpa
