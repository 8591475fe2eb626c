// The scalar family: `scalar` (synchronous tile loads) and `cp_async` (double-buffered cp.async ring).
#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_scalar.cuh"

namespace sdpa {

cudaError_t launch_scalar(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<ScalarVariant<0>, kWideHeadDim>(p, s);
}
cudaError_t launch_cp_async(const AttentionParams& p, cudaStream_t s) { return launch_variant<ScalarVariant<2>>(p, s); }

}  // namespace sdpa
