// One launcher per built variant (name[+toggle...]); the table in attention_dispatch.cu lists them.
#pragma once

#include <cuda_runtime.h>

#include "../common/params.h"

namespace sdpa {

using AttentionLauncher = cudaError_t (*)(const AttentionParams&, cudaStream_t);

// An attribute of the current device (0 if the runtime cannot say).
int current_device_attribute(cudaDeviceAttr attribute);
// SMs of the current device (0 if the runtime cannot say): a wave of the Hopper variants, one block per SM.
int multiprocessor_count();

cudaError_t launch_scalar(const AttentionParams&, cudaStream_t);
cudaError_t launch_cp_async(const AttentionParams&, cudaStream_t);
cudaError_t launch_wmma(const AttentionParams&, cudaStream_t);
cudaError_t launch_fused_softmax(const AttentionParams&, cudaStream_t);
cudaError_t launch_fused_softmax_swizzle(const AttentionParams&, cudaStream_t);
cudaError_t launch_pipe3(const AttentionParams&, cudaStream_t);
cudaError_t launch_pipe3_swizzle(const AttentionParams&, cudaStream_t);
cudaError_t launch_warp_spec(const AttentionParams&, cudaStream_t);
cudaError_t launch_warp_spec_swizzle(const AttentionParams&, cudaStream_t);
cudaError_t launch_warp_spec_2producers(const AttentionParams&, cudaStream_t);
cudaError_t launch_warp_spec_2producers_swizzle(const AttentionParams&, cudaStream_t);
cudaError_t launch_fp8_mma(const AttentionParams&, cudaStream_t);
cudaError_t launch_fp8_mma_fp8_pv(const AttentionParams&, cudaStream_t);
cudaError_t launch_fp8_mma_m32(const AttentionParams&, cudaStream_t);
cudaError_t launch_fp8_mma_m16(const AttentionParams&, cudaStream_t);
cudaError_t launch_fp8_split(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_predecode(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_fp8(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_m192(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_fp8_m192_fp8_pv(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_fp8_m64(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_fp8_fp8_pv(const AttentionParams&, cudaStream_t);
cudaError_t launch_wgmma_fp8_m64_fp8_pv(const AttentionParams&, cudaStream_t);
cudaError_t launch_decode(const AttentionParams&, cudaStream_t);
cudaError_t launch_decode_wgmma(const AttentionParams&, cudaStream_t);

}  // namespace sdpa
