// V codes transposed for the E4M3 P V of `wgmma_fp8+fp8_pv` (transpose_values.cu): wgmma reads an E4M3 B operand
// K-major only, so P V needs each tile of V as [D][keys]. A pass over memory writes that once per kv head, where
// the producers of every query block transpose every tile they load.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/params.h"

namespace sdpa {

// Bytes of a row of V^T (one dim, every key): the keys rounded up to 16, a multiple of the 16 bytes that TMA
// strides need; the keys past seqlen_k hold zero codes.
SDPA_HOST_DEVICE int64_t transposed_values_row_bytes(const AttentionParams& params) {
  return (params.seqlen_k + 15) / 16 * 16;
}
// Whether the pass pays for a grid of block_m query rows per block: where a kv head has at least 32 query blocks
// (causal, whose blocks see half the keys on average, 128). It reads and writes V once (33.5 MB at
// 4x16x2048x128), while the blocks' transposes cost up to ~10% of the kernel. Graph us of `wgmma_fp8+fp8_pv`,
// producers / pass, H200, two alternating rounds in each of two runs (one kernel read up to 9% apart between
// rounds): 1x16x8192x128 (64 blocks a kv head) 640.7, 661.2 / 619.3, 616.0 and 639.2, 658.8 / 624.0, 636.7, causal
// 333.8, 333.6 / 323.8, 327.4 and 349.3, 340.9 / 336.2, 366.3; 4x16x2048x128 (16) 178.1, 177.7 / 176.9, 177.0,
// causal 108.8, 108.7 / 114.7, 114.5; 2x16x4096x128 (32) 339.9, 342.0 / 339.2, 336.5; 1x32x8x2048x128 (64) 90.2,
// 91.9 / 87.5, 85.6, causal 54.8, 54.3 / 52.6, 53.3; 1x16x8192x64 534.3, 535.8 / 511.2, 507.1.
// What V^T already in memory would save where the blocks transpose (ncu durations of the attention kernel alone,
// running clocks, H200, 2026-11-29, two calls each, transposing / reading V^T; the pass took 6-10.6 us):
// 4x16x2048x128 170.7, 170.5 / 162.1, 162.5, causal 101.5, 102.1 / 103.1, 102.6; 4x16x2048x64 134.0, 134.6 / 130.0,
// 130.7, causal 81.2, 81.3 / 79.0, 79.1; 1x16x8192x128 causal 298.9, 297.3 / 291.9, 292.8. The streaming quantizer
// writing V^T instead (four designs built, 2026-11-29) cost more than that: `quantize_fp8_kv` 39.2 to 63.1 us
// against 32.9 at 4x16x2048x128, the drop-in `fast` 205.4 to 233.4 against 202.7 to 205.3: gathering a key group's
// codes holds up the next head's copies, a staging buffer for the codes costs a block an SM, and stores of less
// than a 32-byte sector cost the most (benchmarks/results/h200-2026-11-29-vt-quantizer.md).
bool values_by_pass_pays(const AttentionParams& params, int block_m);
// The rows per block of `wgmma_fp8+fp8_pv`, for which the workspace is planned; `wgmma_fp8_m192+fp8_pv` runs the
// pass too, where its fewer blocks of 192 rows pay (and so those of 128 do).
constexpr int kValuesByPassBlockM = 128;
// The workspace of `wgmma_fp8+fp8_pv` and `wgmma_fp8_m192+fp8_pv`: V^T [B * Hkv][D][transposed_values_row_bytes]
// codes where the pass pays for 128-row blocks, else none.
int64_t transposed_values_workspace_bytes(const AttentionParams& params);

// Writes V^T into params.workspace, the keys of each 16 in the order of the E4M3 P fragments (key_of_position);
// needs 16-byte aligned v rows. Launched as a programmatic dependent launch where params.overlap_launch allows it.
cudaError_t launch_transpose_values(const AttentionParams& params, cudaStream_t stream);

}  // namespace sdpa
