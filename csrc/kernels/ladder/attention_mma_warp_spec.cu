// Warp-specialized mma.sync variants: 1 or 2 producer warps fill a 2-stage ring of fp16 K/V tiles.
#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_mma.cuh"

namespace sdpa {

cudaError_t launch_warp_spec(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<2, false, 1>, kWideHeadDim>(p, s);
}
cudaError_t launch_warp_spec_swizzle(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<2, true, 1>, kWideHeadDim>(p, s);
}
cudaError_t launch_warp_spec_2producers(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<2, false, 2>, kWideHeadDim>(p, s);
}
cudaError_t launch_warp_spec_2producers_swizzle(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<MmaVariant<2, true, 2>, kWideHeadDim>(p, s);
}

}  // namespace sdpa
