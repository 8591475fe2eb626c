// The `wmma` variant.
#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_wmma.cuh"

namespace sdpa {

cudaError_t launch_wmma(const AttentionParams& p, cudaStream_t s) { return launch_variant<WmmaVariant>(p, s); }

}  // namespace sdpa
