// The cluster quantizer (sm_90): one launch for q, k and v, a thread-block cluster per head that holds the head in
// registers and meets through distributed shared memory, so each head is read from global memory once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/fp8.h"
#include "../common/ptx.cuh"
#include "../dispatch/launch.h"
#include "channel_stats.cuh"
#include "encode.cuh"
#include "quantize_common.cuh"

namespace sdpa {
namespace {

using quantize::block_max;
using quantize::cluster_amax;
using quantize::cluster_launch_config;
using quantize::head_values;
using quantize::kQuantThreads;
using quantize::send_block_amax;
using quantize::smooths;
using quantize::smoothing_stats_bytes;
using quantize::tensor_of;
using quantize::vector_amax;

// The cluster kernel (sm_90): a cluster of blocks per head, each holding its share of the head in registers (at
// most kHeldVectors 16-byte vectors per thread). The blocks' amaxes meet through distributed shared memory, so
// the head is read once and no block waits on another launch. At 1x8x512x64 the one-block-per-head kernel ran 24
// blocks for 3 x 8 heads and took 6.5 us on an H200, most of it one block streaming 64 KB. Clusters of 16 blocks
// (a non-portable size, where the GPU runs it) instead of 8, each thread then holding one vector instead of two:
// 3.5-3.7 against 4.2 us per call for q, k and v at 1x8x512x64, end to end 9.0-9.1 against 9.5 us (H200, CUDA-graph
// replay, two runs each). Letting the next kernel launch only after the amax (instead of at the start) did not
// help: 3.9 us.
constexpr int kMinClusterCtas = 8, kMaxClusterCtas = 16, kClusterThreads = kQuantThreads, kHeldVectors = 8;

// Smoothing in the cluster kernel, once every block's per-channel totals [3][cols] are in its shared memory: rank r
// adds up every rank's totals of its slice of the channels (their mean goes to its `totals + 3 cols`, the slice's
// amax to slice_amax), then every block gathers the slices' means into `gathered` [cols]. So a block reads about
// 4 x cols values through distributed shared memory, where reading every rank's totals took 3 x cols x ctas.
// Returns the head's amax in warp 0; all blocks add the ranks' totals in the same order.
template <class Cluster>
__device__ float cluster_smoothed_amax(const Cluster& cluster, const QuantizeParams& p, int ctas, int rank,
                                       float* totals, float* gathered) {
  __shared__ float slice_amax;
  const int slice = (p.cols + ctas - 1) / ctas, first = rank * slice, lanes = ctas * slice;
  float* shift = totals + 3 * p.cols;  // this block's, read by the others for its slice
  for (int i = threadIdx.x; i < lanes; i += kClusterThreads) {  // [3][ctas][slice], rank-major
    const int r = i / slice, c = first + i % slice;
    if (c < p.cols) {
      const float* theirs = cluster.map_shared_rank(totals, r);
      gathered[i] = theirs[c];
      gathered[lanes + i] = theirs[p.cols + c];
      gathered[2 * lanes + i] = theirs[2 * p.cols + c];
    }
  }
  __syncthreads();
  float channel_amax = 0.0f;
  for (int j = threadIdx.x; j < slice && first + j < p.cols; j += kClusterThreads) {
    ChannelTotal total;
    for (int r = 0; r < ctas; ++r) total.merge(gathered + r * slice + j, lanes);
    channel_amax = fmaxf(channel_amax, total.smoothed_amax(p.rows, shift, first + j));
  }
  channel_amax = block_max(channel_amax);
  if (threadIdx.x == 0) slice_amax = channel_amax;
  cluster.sync();  // every slice's means and amax are in their block's shared memory
  for (int c = threadIdx.x; c < p.cols; c += kClusterThreads) {
    gathered[c] = *cluster.map_shared_rank(shift + c, c / slice);
  }
  float amax = threadIdx.x < ctas ? *cluster.map_shared_rank(&slice_amax, threadIdx.x) : 0.0f;
  return group_max<32>(amax);
}

// Four blocks per SM (64 registers): smoothing took 113-128 unbounded, and the plain kernel on bf16 70 (fp32 fits
// 58 unbounded and spills at 64).
template <typename T, bool kSmooth>
__global__ void __launch_bounds__(kClusterThreads, kSmooth || sizeof(T) == 2 ? 4 : 0)
    quantize_heads_cluster_kernel(const QuantizeHeadsParams b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kVec = 16 / sizeof(T);
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int index = blockIdx.x / ctas;
  const int t = tensor_of(b, index);
  const QuantizeParams& p = b.tensors[t];
  const int head = index - b.first_block[t];
  const T* x = head_values<T>(p, head);
  const int vecs_per_row = p.cols / kVec, vecs = p.rows * vecs_per_row;
  const int per_block = (vecs + ctas - 1) / ctas;
  const int begin = rank * per_block, end = min(vecs, begin + per_block);
  __shared__ float block_amaxes[kMaxClusterCtas];  // every block's amax (send_block_amax)
  __shared__ alignas(8) uint64_t amaxes_arrived;
  if (threadIdx.x == 0) {
    mbarrier_init(&amaxes_arrived, 1);
    fence_mbarrier_init();  // visible across the cluster by its start barrier, before any block stores into another
  }
  arrive_cluster_start();
  allow_next_grid_launch();
  wait_for_previous_grids();  // launched overlapping the previous kernel (sm_90), which may write x

  // With smoothing (p.shift) the blocks also meet through their per-channel totals (channel_stats.cuh), kept in the
  // dynamic shared memory the launch sizes for them.
  extern __shared__ __align__(16) float cluster_stats[];
  const bool smooth = kSmooth && p.shift != nullptr;
  const int column = (begin + threadIdx.x) % vecs_per_row * kVec;  // of every vector this thread holds
  uint4 held[kHeldVectors];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) {
    const int i = begin + threadIdx.x + j * kClusterThreads;
    if (i < end) {
      held[j] = *reinterpret_cast<const uint4*>(x + (i / vecs_per_row) * p.x_row_stride + i % vecs_per_row * kVec);
      amax = fmaxf(amax, vector_amax<T>(held[j]));
    }
  }
  __shared__ float head_scale;
  float* totals = nullptr;
  if (smooth) {
    // A quarter of the thread's channels at a time, within four blocks' 64 registers (all of them at once took
    // 113-128).
    constexpr int kChannels = kVec / 4;
#pragma unroll
    for (int quarter = 0; quarter < 4; ++quarter) {
      ChannelStats<kChannels> stats;
#pragma unroll
      for (int j = 0; j < kHeldVectors; ++j) {
        if (begin + threadIdx.x + j * kClusterThreads < end) {
          float values[kChannels];
          const T* elems = reinterpret_cast<const T*>(&held[j]) + quarter * kChannels;
#pragma unroll
          for (int e = 0; e < kChannels; ++e) values[e] = to_float(elems[e]);
          stats.add(values);
        }
      }
      stats.reduce_lanes(vecs_per_row);
      stats.store_warp(cluster_stats, kClusterThreads / 32, p.cols, threadIdx.x / 32, threadIdx.x % 32, vecs_per_row,
                       column + quarter * kChannels);
    }
    __syncthreads();
    totals = total_channel_stats(cluster_stats, kClusterThreads / 32, p.cols);
  } else {
    amax = block_max(amax);  // in warp 0
  }
  wait_cluster_start();
  if (!smooth) send_block_amax(block_amaxes, &amaxes_arrived, ctas, rank, amax);
  float scale;
  if (smooth) {
    cluster.sync();  // every block's per-channel totals are in its shared memory
    // The warps' statistics are spent: their space takes the gathered shift (cluster_smoothed_amax).
    amax = cluster_smoothed_amax(cluster, p, ctas, rank, totals, cluster_stats);
    if (threadIdx.x == 0) head_scale = scale_from_amax(amax);
    // Done reading the other blocks' shared memory: a block may leave once all have arrived (checked at the end).
    arrive_cluster_done();
    __syncthreads();
    scale = head_scale;
  } else {
    // Written into every block rather than read from the others: graph us for q, k and v, H100, same run, read /
    // written: 4.1 / 3.4 at 1x8x512x64 (fp16; bf16 4.1 / 3.7), 32.3 / 27.6 at 4x16x768x128. Counted in on an
    // mbarrier rather than met at a cluster barrier (send_block_amax): H200, 1x8x512x64 fp16, three alternating
    // runs, 2.77-2.79 against 3.31-3.33 (the same with a cluster barrier before a block leaves: 3.24-3.25).
    mbarrier_wait(&amaxes_arrived, 0);
    scale = scale_from_amax(cluster_amax(block_amaxes, ctas));
  }
  if (rank == 0 && threadIdx.x == 0) p.scale[head] = scale;
  // Smoothing and bf16 divide every value (bounds_values false at compile time, so the FMA quotient is not even
  // compiled in): with it the plain bf16 kernel spilled 24 bytes at its 64 registers (2 to 32 bytes however the
  // encode was written); with smoothing, the bf16 kernel spilled 2 bytes under the bracketed quotient it replaced.
  constexpr bool kDivides = kSmooth || std::is_same_v<T, __nv_bfloat16>;
  const E4m3Divisor divisor(scale, /*bounds_values=*/!kDivides);
  // The means, gathered by cluster_smoothed_amax, are read with each vector: held in registers beside the held
  // values they took bf16 past four blocks' 64.
  const float* shift = smooth ? cluster_stats + column : nullptr;
  for (int c = threadIdx.x; smooth && rank == 0 && c < p.cols; c += kClusterThreads) {
    p.shift[static_cast<int64_t>(head) * p.cols + c] = cluster_stats[c];
  }
  uint8_t* codes = p.codes + static_cast<int64_t>(head) * vecs * kVec;
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) {
    const int i = begin + threadIdx.x + j * kClusterThreads;
    if (i < end) {
      float values[kVec];
      const T* elems = reinterpret_cast<const T*>(&held[j]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) values[e] = to_float(elems[e]) - (smooth ? shift[e] : 0.0f);
      store_codes<kVec>(codes + static_cast<int64_t>(i) * kVec, values, divisor);
    }
  }
  if (smooth) wait_cluster_done();
#endif
}

// kMaxClusterCtas where the GPU can run clusters that large of this kernel, else kMinClusterCtas; asked once per
// device.
template <typename T, bool kSmooth>
int cluster_ctas(cudaLaunchConfig_t config) {
  static std::atomic<int> known[64];  // by device ordinal; 0 = not asked yet (threads asking at once agree)
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return kMinClusterCtas;
  if (known[device].load(std::memory_order_relaxed) == 0) {
    cudaLaunchAttribute cluster = {};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kMaxClusterCtas;
    cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
    config.gridDim = dim3(kMaxClusterCtas);
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    const bool fits =
        cudaFuncSetAttribute(quantize_heads_cluster_kernel<T, kSmooth>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1) == cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, quantize_heads_cluster_kernel<T, kSmooth>, &config) ==
            cudaSuccess &&
        clusters > 0;
    cudaGetLastError();  // a refusal above is an answer, not an error of this launch
    known[device].store(fits ? kMaxClusterCtas : kMinClusterCtas, std::memory_order_relaxed);
  }
  return known[device].load(std::memory_order_relaxed);
}

// The 16-byte vectors of one head of p (4 fp32 or 8 fp16/bf16 values each), and those a cluster block holds.
int64_t head_vectors(const QuantizeParams& p) {
  const int64_t vec = p.x_type == InputType::kFloat32 ? 4 : 8;
  return (static_cast<int64_t>(p.rows) * p.cols + vec - 1) / vec;
}
constexpr int64_t kBlockVectors = int64_t{kClusterThreads} * kHeldVectors;

// The fewest blocks whose registers hold the largest head of the batch.
int fewest_ctas(const QuantizeHeadsParams& b, int most) {
  int64_t ctas = 1;
  for (int t = 0; t < b.count; ++t) {
    ctas = std::max(ctas, (head_vectors(b.tensors[t]) + kBlockVectors - 1) / kBlockVectors);
  }
  return static_cast<int>(std::min<int64_t>(ctas, most));
}

template <typename T, bool kSmooth>
cudaError_t launch_heads_cluster_typed(const QuantizeHeadsParams& b, bool fewest, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kClusterThreads);
  config.stream = stream;
  config.dynamicSmemBytes = smoothing_stats_bytes(b, kClusterThreads / 32);
  const int most = cluster_ctas<T, kSmooth>(config);
  const int ctas = fewest ? fewest_ctas(b, most) : most;
  cudaLaunchAttribute attrs[2];
  config = cluster_launch_config(static_cast<unsigned>(b.first_block[b.count]) * ctas, ctas, config.dynamicSmemBytes,
                                 stream, attrs);
  return cudaLaunchKernelEx(&config, quantize_heads_cluster_kernel<T, kSmooth>, b);
}

// The blocks of the largest cluster the cluster kernel runs with for this batch on this device.
template <bool kSmooth>
int largest_cluster(const QuantizeHeadsParams& b) {
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kClusterThreads);
  config.dynamicSmemBytes = smoothing_stats_bytes(b, kClusterThreads / 32);
  switch (b.tensors[0].x_type) {
    case InputType::kFloat32:
      return cluster_ctas<float, kSmooth>(config);
    case InputType::kFloat16:
      return cluster_ctas<__half, kSmooth>(config);
    default:
      return cluster_ctas<__nv_bfloat16, kSmooth>(config);
  }
}

}  // namespace

// Heads up to what 16 blocks hold (512 KB of fp16: 2048 x 128) where the GPU runs 16-block clusters: read once,
// where two passes read them twice. q, k and v at 4x16x2048x128 in fp16: 98.2 against 123.0 us (graph replay, H100,
// one run; the one-read floor is 50.7 us).
bool quantize_heads_by_cluster(const QuantizeHeadsParams& b, int sm) {
  // The grid is up to kMaxClusterCtas blocks per head, and grid.x is at most 2^31 - 1.
  if (sm < 90 || !b.vectorized || b.first_block[b.count] > INT_MAX / kMaxClusterCtas) return false;
  const int64_t most_vectors = (smooths(b) ? largest_cluster<true>(b) : largest_cluster<false>(b)) * kBlockVectors;
  for (int t = 0; t < b.count; ++t) {
    if (head_vectors(b.tensors[t]) > most_vectors) return false;
  }
  return true;
}

cudaError_t launch_quantize_heads_cluster(const QuantizeHeadsParams& b, bool fewest_blocks, cudaStream_t stream) {
  return with_input_type(b.tensors[0].x_type, [&](auto value) {
    using T = decltype(value);
    return smooths(b) ? launch_heads_cluster_typed<T, true>(b, fewest_blocks, stream)
                      : launch_heads_cluster_typed<T, false>(b, fewest_blocks, stream);
  });
}

}  // namespace sdpa
