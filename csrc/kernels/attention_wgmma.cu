// The Hopper variants (sm_90a): wgmma fed by TMA and a producer warpgroup. Host side: the TMA descriptors.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "attention_wgmma.cuh"
#include "variant_launch.cuh"
#include "variant_launchers.h"

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

// A [B, H, S, D] tensor of one-byte codes (strides in bytes, the last dim contiguous), read in boxes of `rows` x D.
// With `swizzle` the box lands in the 64- or 128-byte swizzle of D-byte rows that wgmma reads.
cudaError_t encode_code_map(CUtensorMap* map, const uint8_t* base, int batch, int heads, int seqlen, int head_dim,
                            int64_t batch_stride, int64_t head_stride, int64_t row_stride, int rows, bool swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seqlen),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  // A dim of size 1 is never stepped over, but its stride must still be a non-zero multiple of 16.
  const int64_t span = row_stride * seqlen;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_stride),
                                 static_cast<cuuint64_t>(heads == 1 ? span : head_stride),
                                 static_cast<cuuint64_t>(batch == 1 ? span : batch_stride)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(head_dim), static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapSwizzle mode = !swizzle         ? CU_TENSOR_MAP_SWIZZLE_NONE
                                  : head_dim == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                    : CU_TENSOR_MAP_SWIZZLE_64B;
  const CUresult result =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<uint8_t*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, mode, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t make_wgmma_maps(const AttentionParams& p, int kv_rows, bool swizzle_k, WgmmaMaps* maps) {
  cudaError_t err = encode_code_map(&maps->k, p.k, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, p.k_batch_stride,
                                    p.k_head_stride, p.k_row_stride, kv_rows, swizzle_k);
  if (err == cudaSuccess) {
    err = encode_code_map(&maps->v, p.v, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, p.v_batch_stride,
                          p.v_head_stride, p.v_row_stride, kv_rows, false);
  }
  return err;
}

cudaError_t launch_wgmma(const AttentionParams& p, cudaStream_t s) { return launch_variant<WgmmaVariant<false>>(p, s); }
cudaError_t launch_wgmma_fp8(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<WgmmaVariant<true>>(p, s);
}

}  // namespace sdpa
