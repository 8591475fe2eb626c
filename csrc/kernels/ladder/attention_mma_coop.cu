// Cooperative mma.sync variants: every warp loads (cp.async ring) and computes.
#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_mma.cuh"

namespace sdpa {

cudaError_t launch_fused_softmax(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<2, false, 0>, kWideHeadDim>(p, s);
}
cudaError_t launch_fused_softmax_swizzle(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<2, true, 0>, kWideHeadDim>(p, s);
}
cudaError_t launch_pipe3(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<3, false, 0>, kWideHeadDim>(p, s);
}
cudaError_t launch_pipe3_swizzle(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<3, true, 0>, kWideHeadDim>(p, s);
}

}  // namespace sdpa
