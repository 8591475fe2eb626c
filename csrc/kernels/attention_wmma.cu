// The `wmma` variant.
#include "attention_wmma.cuh"
#include "variant_launch.cuh"
#include "variant_launchers.h"

namespace sdpa {

cudaError_t launch_wmma(const AttentionParams& p, cudaStream_t s) { return launch_variant<WmmaVariant>(p, s); }

}  // namespace sdpa
