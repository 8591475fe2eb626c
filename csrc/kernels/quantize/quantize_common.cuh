// What the quantizer's kernels share (quantize_two_pass.cu, quantize_heads.cu, quantize_cluster.cu,
// quantize_stream.cu): the block size of the two-pass and cluster kernels, where a head starts, a block-wide max,
// the cluster-wide amax, a vector's amax, which tensor of a batch a head belongs to, the shared memory smoothing
// needs, and a cluster launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/params.h"
#include "../hopper/hopper.cuh"
#include "channel_stats.cuh"
#include "encode.cuh"

namespace sdpa {
namespace quantize {

constexpr int kQuantThreads = 256;

// A thread's vectors of a run of rows of vecs_per_row vectors are k, k + kQuantThreads, ...: where a row's vectors
// divide the block's threads (steps_whole_rows) each lies `row_step` values after the one before, one add in place of
// its row and column (an integer division and two 64-bit multiplies a vector).
// (Blocks of kThreads threads likewise.)
template <int kThreads = kQuantThreads>
__device__ __forceinline__ bool steps_whole_rows(int vecs_per_row) {
  return kThreads % vecs_per_row == 0;
}
template <int kThreads = kQuantThreads>
__device__ __forceinline__ int64_t row_step(int vecs_per_row, int64_t row_stride) {
  return steps_whole_rows<kThreads>(vecs_per_row) ? kThreads / vecs_per_row * row_stride : 0;
}

// Where head `head` (of B x H, batch-major) of p starts, in values of its input type.
__device__ __forceinline__ int64_t head_offset(const QuantizeParams& p, int head) {
  return (head / p.heads) * p.x_batch_stride + (head % p.heads) * p.x_head_stride;
}
template <typename T>
__device__ __forceinline__ const T* head_values(const QuantizeParams& p, int head) {
  return static_cast<const T*>(p.x) + head_offset(p, head);
}

// The max over a block of kThreads (at most 1024) threads; valid in warp 0. Its warps' maxima go through
// `warp_max` (kThreads / 32 floats of shared memory), which a block may take again only after another barrier of
// all its threads (the form without it keeps its own).
template <int kThreads = kQuantThreads>
__device__ __forceinline__ float block_max(float x, float* warp_max) {
  x = group_max<32>(x);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = x;
  __syncthreads();
  x = threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
  return group_max<32>(x);
}
template <int kThreads = kQuantThreads>
__device__ __forceinline__ float block_max(float x) {
  __shared__ float warp_max[kThreads / 32];
  return block_max<kThreads>(x, warp_max);
}

// The amax of a head that the `ctas` blocks of a cluster (at most 32) share. Each block sends its block_max (valid
// in warp 0) by st.async into slot `rank` of `amaxes` in every block's shared memory, its 4 bytes counted down on
// that block's mbarrier `arrived` (initialized for one arrival; every block must have started: wait_cluster_start),
// on which thread 0 announces the ctas x 4 bytes due. Once the phase of `arrived` completes (mbarrier_wait), every
// thread reads the head's amax from its own block's slots (cluster_amax). Written rather than read across the
// cluster: no round trip through distributed shared memory; and counted in rather than met at a cluster barrier,
// whose release would wait for every load the thread has in flight and for every block to arrive. A block may
// leave once it has read the amaxes, with its own still on the way to others: each of them waits for it, so no
// store reaches a block that has left.
__device__ __forceinline__ void send_block_amax(float* amaxes, const uint64_t* arrived, int ctas, int rank,
                                                float block_amax) {
  if (threadIdx.x == 0) mbarrier_arrive_expect_bytes(arrived, ctas * static_cast<int>(sizeof(float)));
  if (threadIdx.x < ctas) {
    store_async_counted(cluster_shared_address(amaxes + rank, threadIdx.x), __float_as_uint(block_amax),
                        cluster_shared_address(arrived, threadIdx.x));
  }
}
__device__ __forceinline__ float cluster_amax(const float* amaxes, int ctas) {
  const int lane = threadIdx.x % 32;
  return group_max<32>(lane < ctas ? amaxes[lane] : 0.0f);
}

using ::sdpa::vector_amax;  // encode.cuh: the attention kernels' q loaders take it too

// The index of the tensor whose heads include head `index` of all tensors.
__device__ __forceinline__ int tensor_of(const QuantizeHeadsParams& b, int index) {
  int t = 0;
  while (t + 1 < b.count && index >= b.first_block[t + 1]) ++t;
  return t;
}

// Whether a tensor of the batch smooths (QuantizeParams::shift): the one-launch kernels then run their kSmooth
// instantiation, held by launch bounds to the blocks per SM of the plain one (three whole-head blocks, four cluster
// blocks), which its statistics would otherwise cost (49-56 registers against 32-40, 113-128 against 56-64, sm_90a).
inline bool smooths(const QuantizeHeadsParams& b) {
  for (int t = 0; t < b.count; ++t) {
    if (b.tensors[t].shift != nullptr) return true;
  }
  return false;
}

// Shared memory a block of `warps` warps needs for the statistics of the tensors that smooth (0 when none does).
inline int smoothing_stats_bytes(const QuantizeHeadsParams& b, int warps) {
  int cols = 0;
  for (int t = 0; t < b.count; ++t) {
    if (b.tensors[t].shift != nullptr) cols = std::max(cols, b.tensors[t].cols);
  }
  return cols == 0 ? 0 : channel_stats_floats(warps, cols) * static_cast<int>(sizeof(float));
}

// A launch of `blocks` blocks of `threads` in clusters of `ctas`, which may start while the kernel ahead on the
// stream still runs (programmatic stream serialization: see wait_for_previous_grids); the config points into attrs.
inline cudaLaunchConfig_t cluster_launch_config(unsigned blocks, int ctas, size_t smem_bytes, cudaStream_t stream,
                                                cudaLaunchAttribute (&attrs)[2], int threads = kQuantThreads) {
  cudaLaunchConfig_t config = {};
  config.stream = stream;
  config.blockDim = dim3(threads);
  config.gridDim = dim3(blocks);
  config.dynamicSmemBytes = smem_bytes;
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = ctas;
  attrs[0].val.clusterDim.y = attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attrs;
  config.numAttrs = 2;
  return config;
}

}  // namespace quantize
}  // namespace sdpa
