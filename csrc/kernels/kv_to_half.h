// The decode pass of `wgmma+predecode` (kv_to_half.cu).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "params.h"

namespace sdpa {

// Writes the call's K and V codes as fp16 to k_out and v_out, each contiguous [B, Hkv, Sk, D]; needs 16-byte
// aligned k and v rows. Launched as a programmatic dependent launch where params.overlap_launch allows it.
cudaError_t launch_kv_to_half(const AttentionParams& params, __half* k_out, __half* v_out, cudaStream_t stream);

}  // namespace sdpa
