// The native-FP8 variants: 64-, 32- and 16-row query tiles (4, 2 and 1 warps per block), the 64-row one with P V in
// E4M3 too (fp8_pv), and 32-row tiles with the keys split four ways across 8 warps.
#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_fp8.cuh"
#include "attention_fp8_split.cuh"

namespace sdpa {

cudaError_t launch_fp8_mma(const AttentionParams& p, cudaStream_t s) { return launch_variant<Fp8Variant<4, 2>>(p, s); }
cudaError_t launch_fp8_mma_fp8_pv(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<Fp8Variant<4, 2, /*kFp8Output=*/true>>(p, s);
}
cudaError_t launch_fp8_mma_m32(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<Fp8Variant<2, 2>>(p, s);
}
cudaError_t launch_fp8_mma_m16(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<Fp8Variant<1, 2>>(p, s);
}
cudaError_t launch_fp8_split(const AttentionParams& p, cudaStream_t s) {
  return launch_variant<Fp8SplitVariant<2, 4>>(p, s);
}

}  // namespace sdpa
