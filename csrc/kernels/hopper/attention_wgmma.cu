// The Hopper variants (sm_90a): wgmma fed by TMA and a producer warpgroup. Host side: the TMA descriptors.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_wgmma.cuh"
#include "kv_to_half.h"
#include "transpose_values.h"

namespace sdpa {
namespace {

// The driver's tensor-map encoder, looked up once through the runtime (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  return encoder;
}

// A [B, H, S, D] tensor of E4M3 codes or fp16 values (strides in elements, the last dim contiguous) and how it is
// read: boxes of box_rows x box_cols elements, laid out in shared memory with `swizzle`.
struct TileMapSpec {
  const void* base;
  bool fp16;
  int batch, heads, seqlen, head_dim;
  int64_t batch_stride, head_stride, row_stride;
  int box_rows, box_cols;
  CUtensorMapSwizzle swizzle;
};

cudaError_t encode_tile_map(CUtensorMap* map, const TileMapSpec& t) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const int64_t element_bytes = t.fp16 ? 2 : 1;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.head_dim), static_cast<cuuint64_t>(t.seqlen),
                              static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  // A dim of size 1 is never stepped over, but its stride must still be a non-zero multiple of 16 bytes.
  const int64_t span = t.row_stride * t.seqlen;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(t.row_stride * element_bytes),
                                 static_cast<cuuint64_t>((t.heads == 1 ? span : t.head_stride) * element_bytes),
                                 static_cast<cuuint64_t>((t.batch == 1 ? span : t.batch_stride) * element_bytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(t.box_cols), static_cast<cuuint32_t>(t.box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result =
      encode(map, t.fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 4,
             const_cast<void*>(t.base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, t.swizzle,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace

int current_device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    return 0;
  }
  return value;
}

int multiprocessor_count() { return current_device_attribute(cudaDevAttrMultiProcessorCount); }

// The 64- or 128-byte swizzle of wgmma's K-major E4M3 operands, whose rows are `row_bytes` long.
CUtensorMapSwizzle code_rows_swizzle(int row_bytes) {
  return row_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
}

// Code boxes of kv_rows x D: k in the swizzle of D-byte rows that e4m3 wgmma reads (swizzle_k) or plain; v plain,
// in k's swizzle, or its transpose (V^T [B * Hkv][D][row bytes] in the workspace, transpose_values.h) in boxes of
// D x kv_rows in the swizzle of kv_rows-byte rows: that TMA map's rows are dims and its columns keys.
cudaError_t make_wgmma_maps(const AttentionParams& p, int kv_rows, bool swizzle_k, ValuesMap values,
                            WgmmaMaps* maps) {
  const CUtensorMapSwizzle k_swizzle = swizzle_k ? code_rows_swizzle(p.head_dim) : CU_TENSOR_MAP_SWIZZLE_NONE;
  cudaError_t err = encode_tile_map(&maps->k, {p.k, false, p.batch, p.heads_kv, p.seqlen_k, p.head_dim,
                                               p.k_batch_stride, p.k_head_stride, p.k_row_stride, kv_rows,
                                               p.head_dim, k_swizzle});
  if (err != cudaSuccess) return err;
  if (values != ValuesMap::kTransposed) {
    return encode_tile_map(&maps->v, {p.v, false, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, p.v_batch_stride,
                                      p.v_head_stride, p.v_row_stride, kv_rows, p.head_dim,
                                      values == ValuesMap::kSwizzled ? code_rows_swizzle(p.head_dim)
                                                                     : CU_TENSOR_MAP_SWIZZLE_NONE});
  }
  const int64_t row = transposed_values_row_bytes(p), head = row * p.head_dim, batch = head * p.heads_kv;
  return encode_tile_map(&maps->v, {p.workspace, false, p.batch, p.heads_kv, p.head_dim, static_cast<int>(row),
                                    batch, head, row, p.head_dim, kv_rows, code_rows_swizzle(kv_rows)});
}

cudaError_t predecode_wgmma_kv(const AttentionParams& p, int kv_rows, int block_m, WgmmaMaps* maps,
                               cudaStream_t stream) {
  const int blocks_per_kv_head = query_tiles(p, block_m) * (p.heads_q / p.heads_kv);
  // One wgmma block per SM (they take most of an SM's registers and shared memory); with no SM count the plan takes
  // each head's blocks as the lookahead.
  maps->plan = plan_kv_decode(p, blocks_per_kv_head, kv_rows, multiprocessor_count());
  if (cudaError_t err = launch_kv_to_half(p, maps->plan, stream); err != cudaSuccess) return err;
  WgmmaMaps codes;
  if (cudaError_t err = make_wgmma_maps(p, kv_rows, /*swizzle_k=*/false, ValuesMap::kPlain, &codes);
      err != cudaSuccess) {
    return err;
  }
  maps->k_codes = codes.k;
  maps->v_codes = codes.v;
  const int64_t row = p.head_dim, head = row * p.seqlen_k, batch = head * p.heads_kv;
  cudaError_t err = encode_tile_map(&maps->k, {maps->plan.k_halves, true, p.batch, p.heads_kv, p.seqlen_k,
                                               p.head_dim, batch, head, row, kv_rows, 64, CU_TENSOR_MAP_SWIZZLE_128B});
  if (err == cudaSuccess) {
    err = encode_tile_map(&maps->v, {maps->plan.v_halves, true, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, batch,
                                     head, row, kv_rows, 64, CU_TENSOR_MAP_SWIZZLE_128B});
  }
  return err;
}

int64_t split_tail_from(const AttentionParams& p, int64_t blocks, int groups, int block_n) {
  const int sms = multiprocessor_count();  // one block per SM
  const int64_t last_wave = sms > 0 ? blocks % sms : 0;
  const bool split = !p.is_causal && (p.seqlen_k + block_n - 1) / block_n >= groups && last_wave * groups <= sms;
  return split ? blocks - last_wave : blocks;
}

cudaError_t launch_wgmma(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<false, false>>(p, s);
}
cudaError_t launch_wgmma_predecode(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<false, true>, kWideHeadDim>(p, s);
}
cudaError_t launch_wgmma_fp8(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<true, false>>(p, s);
}
cudaError_t launch_wgmma_m192(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<false, false, 3>>(p, s);
}
cudaError_t launch_wgmma_fp8_m192_fp8_pv(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<true, false, 3, true, 3>>(p, s);
}
cudaError_t launch_wgmma_fp8_m64(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<true, false, 1, false, 1>>(p, s);
}
cudaError_t launch_wgmma_fp8_m64_fp8_pv(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<true, false, 1, true, 1>>(p, s);
}
cudaError_t launch_wgmma_fp8_fp8_pv(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<true, false, 2, true>>(p, s);
}

}  // namespace sdpa
