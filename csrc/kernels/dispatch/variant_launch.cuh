// Maps a runtime head dim and output type to a variant's kernel template, written once for all variants.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/params.h"

namespace sdpa {

template <typename Variant, int kHeadDim>
cudaError_t launch_for_output(const AttentionParams& p, cudaStream_t stream) {
  if (p.out_type == OutputType::kBFloat16) return Variant::template launch<kHeadDim, __nv_bfloat16>(p, stream);
  return Variant::template launch<kHeadDim, __half>(p, stream);
}

// Head dims 64 and 128 for every variant; kWideHeadDim (params.h) too where kMaxHeadDim says so (the variant
// table's max_head_dim).
template <typename Variant, int kMaxHeadDim = 128>
cudaError_t launch_variant(const AttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return launch_for_output<Variant, 64>(p, stream);
    case 128:
      return launch_for_output<Variant, 128>(p, stream);
    case kWideHeadDim:
      if constexpr (kMaxHeadDim >= kWideHeadDim) return launch_for_output<Variant, kWideHeadDim>(p, stream);
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;  // the host checks reject other head dims first
  }
}

}  // namespace sdpa
