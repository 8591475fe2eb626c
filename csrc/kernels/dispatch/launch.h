// Torch-free entry points of the CUDA kernels, called by the host code in csrc/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../common/params.h"

namespace sdpa {

// Attention variants built into this library, in ladder order: base name, then toggles in sorted order
// joined by '+' (e.g. "pipe3+swizzle"). Names match sdpa_ext/variants.py.
int attention_variant_count();
const char* attention_variant_name(int index);
// Index of a variant name, or -1 when no variant has that name.
int find_attention_variant(const char* name);
// Whether a variant can read these inputs (some need 16-byte aligned q/k/v rows; those that load through TMA
// descriptors also need every dimension longer than 1 to have a non-zero stride).
bool attention_variant_aligned(int variant, const AttentionParams& params);
// The part of attention_variant_aligned that concerns q.
bool attention_variant_reads_q(int variant, const AttentionParams& params);
bool attention_variant_uses_tma(int variant);
// Whether a variant is built for a head dim: 64 and 128 for all, kWideHeadDim (params.h) for some.
bool attention_variant_takes_head_dim(int variant, int head_dim);
// Whether a variant reads per-batch key lengths (AttentionParams::seqlens_k); only `decode` does.
bool attention_variant_takes_seqlens(int variant);
// Whether a variant quantizes a q given as values itself (AttentionParams::q_type); the host quantizes q for the
// others.
bool attention_variant_quantizes_q(int variant, const AttentionParams& params);
// Scratch memory the variant needs for these inputs (AttentionParams::workspace), in bytes; 0 for most.
int64_t attention_workspace_bytes(int variant, const AttentionParams& params);
// Whether a variant runs on a GPU of compute capability sm (e.g. 89), and those archs in words ("sm_89 or
// newer", "sm_90").
bool attention_variant_runs_on(int variant, int sm);
std::string attention_variant_archs(int variant);
// The variant "auto" runs for these inputs on a GPU of compute capability sm (e.g. 90): the fastest of the full
// precision tier. "fast" picks among every variant, the fast tier included (DESIGN.md section 5).
int auto_attention_variant(const AttentionParams& params, int sm);
int fast_attention_variant(const AttentionParams& params, int sm);

// Enqueues the attention on `stream`; returns the launch error, if any.
cudaError_t launch_attention(const AttentionParams& params, int variant, cudaStream_t stream);

// Enqueues the E4M3 encode of new K and V rows into preallocated caches at per-batch positions (KvAppendParams).
cudaError_t launch_kv_cache_append(const KvAppendParams& params, cudaStream_t stream);

// Number of blocks per head that the two quantization passes use on a GPU of `sms` SMs.
int quantize_chunks(const QuantizeParams& params, int sms);
// Enqueues the amax pass (skipped when params.given_scale is set) and the encode pass.
cudaError_t launch_quantize(const QuantizeParams& params, cudaStream_t stream);

// Shared memory the whole-head kernel needs for these tensors: their largest head, and the smoothing statistics
// when a tensor smooths (QuantizeParams::shift).
int64_t quantize_heads_smem_bytes(const QuantizeHeadsParams& params);
// One launch for all the tensors: a block per head stages the head in shared memory, reduces its amax and
// encodes it from there. Blocks are smaller where `device`'s SMs hold more of them and many short heads wait.
cudaError_t launch_quantize_heads(const QuantizeHeadsParams& params, const cudaDeviceProp& device,
                                  cudaStream_t stream);
// The same for heads of up to 8 x 256 x 8 16-byte vectors on sm_90 and later (16 x 256 x 8 where the GPU runs
// 16-block clusters): a cluster of blocks per head holds the head in registers and reduces its amax through
// distributed shared memory.
// With fewest_blocks, each cluster has as few blocks as hold a head (1 to 16) instead of the most the GPU runs.
bool quantize_heads_by_cluster(const QuantizeHeadsParams& params, int sm);
cudaError_t launch_quantize_heads_cluster(const QuantizeHeadsParams& params, bool fewest_blocks, cudaStream_t stream);
// A persistent grid of clusters on sm_90 (quantize_stream.cu) that take the heads in turn, a cluster per head at a
// time staging it in shared memory, the loads of the next head overlapping the encode of this one: heads up to
// 512 KB, vectorized rows, no smoothing.
bool quantize_heads_by_stream(const QuantizeHeadsParams& params, int sm);
cudaError_t launch_quantize_heads_stream(const QuantizeHeadsParams& params, cudaStream_t stream);

}  // namespace sdpa
