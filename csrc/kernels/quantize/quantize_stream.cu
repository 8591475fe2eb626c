// The streaming quantizer (sm_90): a persistent grid of thread-block clusters that take the heads of q, k and v in
// turn, one head per cluster at a time, each head read from global memory once.
//
// A block holds its share of the head in registers. The blocks of a cluster exchange their amaxes of a head by
// st.async into each other's shared memory, each block counting them in on an mbarrier of its own, so no barrier
// spans the cluster per head. A block loads its share of the cluster's next head as soon as it has encoded this one;
// the clusters are launched once, not once per head (the cluster kernel, quantize_cluster.cu, launches a cluster per
// head, for heads the stream does not take and for smoothing).
//
// Against the kernel this replaced (shares staged in shared memory by cp.async, the next head's copies started
// during the encode, a cluster barrier per head), k and v of fp16 as the drop-in quantizes them, graph us, H200,
// scripts/bench_quantize_stream.cu, two alternating runs (2026-11-29): 4x16x2048x128 29.0-29.3 / 32.9 (a plain
// cast of the same bytes 25.8), 4x16x2048x64 15.8-16.0 / 18.1-18.2, 4x32x2048x128 54.7-55.3 / 61.7-61.8,
// 2x16x4096x128 32.9-33.0 / 36.5-36.6, 4x16x2048x256 58.7-59.0 / 63.0-63.2, 8x16x1024x128 30.3-30.4 / 33.9-34.2,
// 4x16x385x128 5.9 / 8.4-8.5, 8x16x1024x64 14.4 / 20.7-20.8; q, k and v 42.8-42.9 / 47.3-47.4 at 4x16x2048x128,
// 10.0 / 9.5-9.6 at 4x16x385x128 (the one shape it lost). What it took: the st.async exchange alone, in the staged
// kernel, lost (36.7 against 32.7 at 4x16x2048x128); shares in registers with a cluster barrier per head ran 31.7,
// with the exchange 28.2 (a scratch kernel with plain addressing).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "../common/attention_common.cuh"
#include "../common/fp8.h"
#include "../common/ptx.cuh"
#include "../dispatch/launch.h"
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
using quantize::tensor_of;
using quantize::vector_amax;

// A block's share of a head: kHeldPerThread 16-byte vectors a thread. Heads up to 512 KB take blocks of 256 threads
// (32 KB shares), as few as hold the head, so that four blocks of different clusters share an SM and one's loads run
// while another waits for its amaxes; heads up to 1 MB (and those up to kPairedHeadBytes, which two 64-KB shares
// hold) blocks of 512 threads, two an SM. 512-thread blocks at every size, k and v, graph us, H200, same runs as
// above: 4x16x2048x128 32.0 against 29.0-29.3, 4x32x2048x128 56.8-57.0 against 54.7-55.3; 256-thread blocks for
// the small heads: 4x16x385x128 6.9 against 5.9, 8x16x1024x64 15.1-15.2 against 14.4.
constexpr int kMaxStreamCtas = 16, kHeldPerThread = 8;
constexpr int64_t kShareBytes = int64_t{kQuantThreads} * kHeldPerThread * 16, kPairedHeadBytes = 4 * kShareBytes;

// The 16-byte vectors of head `index` (of all the tensors) that cluster block `rank` of `ctas` holds: vectors
// [begin, begin + count) of the head, in row-major order.
template <typename T>
struct HeadShare {
  static constexpr int kVec = 16 / sizeof(T);
  const QuantizeParams* p;
  const T* x;       // the head's first value
  uint8_t* codes0;  // the code of the share's first value
  int head;         // within its tensor
  int vecs_per_row, begin, count;

  __device__ HeadShare(const QuantizeHeadsParams& b, int index, int ctas, int rank) {
    const int t = tensor_of(b, index);
    p = &b.tensors[t];
    head = index - b.first_block[t];
    x = head_values<T>(*p, head);
    vecs_per_row = p->cols / kVec;
    const int vecs = p->rows * vecs_per_row, per_block = (vecs + ctas - 1) / ctas;
    begin = min(vecs, rank * per_block);
    count = min(vecs, begin + per_block) - begin;
    codes0 = p->codes + static_cast<int64_t>(head) * p->rows * p->cols + static_cast<int64_t>(begin) * kVec;
  }

  __device__ const T* vector(int k) const {
    const int i = begin + k;
    return x + static_cast<int64_t>(i / vecs_per_row) * p->x_row_stride + i % vecs_per_row * kVec;
  }
  __device__ uint8_t* codes(int k) const { return codes0 + k * kVec; }
};

// Where this thread's vectors of a share are in global memory, in blocks of kThreads: vectors k = threadIdx.x +
// j kThreads, the j-th `step` values after the first where a row's vectors divide the block's threads (16-bit rows
// of 8 to 2048 values in powers of two), else HeadShare::vector(k): one add a vector instead of an integer division
// and two 64-bit multiplies.
template <typename T, int kThreads>
struct ThreadVectors {
  const T* first;
  int64_t step;
  bool stepped;

  __device__ explicit ThreadVectors(const HeadShare<T>& share) {
    const int i = share.begin + threadIdx.x;
    first = share.x + static_cast<int64_t>(i / share.vecs_per_row) * share.p->x_row_stride +
            i % share.vecs_per_row * HeadShare<T>::kVec;
    stepped = quantize::steps_whole_rows<kThreads>(share.vecs_per_row);
    step = quantize::row_step<kThreads>(share.vecs_per_row, share.p->x_row_stride);
  }
  // Vector k = threadIdx.x + j kThreads of the share, which is `at` (first + j step) where stepped.
  __device__ const T* vector(const HeadShare<T>& share, int k, const T* at) const {
    return stepped ? at : share.vector(k);
  }
};

// Loads this thread's vectors of a share into `held`: vector k = threadIdx.x + j kThreads into held[j].
template <typename T, int kThreads>
__device__ __forceinline__ void load_share(const HeadShare<T>& share, uint4 (&held)[kHeldPerThread]) {
  const ThreadVectors<T, kThreads> from(share);
#pragma unroll
  for (int j = 0; j < kHeldPerThread; ++j) {
    const int k = static_cast<int>(threadIdx.x) + j * kThreads;
    if (k < share.count) held[j] = *reinterpret_cast<const uint4*>(from.vector(share, k, from.first + j * from.step));
  }
}

// Each block holds its share of a head in registers (kHeldPerThread a thread). The blocks' amaxes go by st.async into
// every block's slots, counted on an mbarrier there (send_block_amax): no barrier across the cluster per head. The
// next head's share is loaded once this one is encoded; the blocks of other clusters on the SM hide the wait. Four
// blocks of 256 threads (or two of 512) an SM at 64 registers.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads) quantize_stream_kernel(const QuantizeHeadsParams b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kVec = HeadShare<T>::kVec;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int clusters = static_cast<int>(gridDim.x) / ctas, heads = b.first_block[b.count];
  // Every block's amax of a head, by the parity of the cluster's head count, and the mbarriers that count them in.
  // A block stores into a parity's slots again two heads on, after every block has sent its amax of the head in
  // between, which each sends only after reading this head's slots (block_max's barrier).
  __shared__ float share_amax[2][kMaxStreamCtas];
  // block_max's warp maxima by the same parity: between a head's reads of them and the writes two heads on, block
  // max's barrier of the head in between (no barrier of the block's threads separates one head from the next).
  __shared__ float warp_max[2][kThreads / 32];
  __shared__ alignas(8) uint64_t share_amax_arrived[2];
  if (threadIdx.x == 0) {
    mbarrier_init(&share_amax_arrived[0], 1);
    mbarrier_init(&share_amax_arrived[1], 1);
    fence_mbarrier_init();  // visible across the cluster by its start barrier, before any block stores into another
  }
  arrive_cluster_start();
  allow_next_grid_launch();
  wait_for_previous_grids();  // launched overlapping the previous kernel, which may write the inputs
  int index = static_cast<int>(blockIdx.x) / ctas;
  uint4 held[kHeldPerThread];
  if (index < heads) load_share<T, kThreads>(HeadShare<T>(b, index, ctas, rank), held);
  wait_cluster_start();  // while the first share lands
  for (int n = 0; index < heads; ++n, index += clusters) {
    const HeadShare<T> share(b, index, ctas, rank);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kHeldPerThread; ++j) {
      if (static_cast<int>(threadIdx.x) + j * kThreads < share.count) amax = fmaxf(amax, vector_amax<T>(held[j]));
    }
    amax = block_max<kThreads>(amax, warp_max[n % 2]);
    send_block_amax(share_amax[n % 2], &share_amax_arrived[n % 2], ctas, rank, amax);
    mbarrier_wait(&share_amax_arrived[n % 2], n / 2 % 2);  // every block's amax of the head is in its slots
    const E4m3Divisor scale(scale_from_amax(cluster_amax(share_amax[n % 2], ctas)), /*bounds_values=*/true);
    if (rank == 0 && threadIdx.x == 0) share.p->scale[share.head] = scale.scale;
#pragma unroll
    for (int j = 0; j < kHeldPerThread; ++j) {
      const int k = static_cast<int>(threadIdx.x) + j * kThreads;
      if (k < share.count) {
        const T* elems = reinterpret_cast<const T*>(&held[j]);
        float values[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) values[e] = to_float(elems[e]);
        store_codes<kVec>(share.codes(k), values, scale);
      }
    }
    if (index + clusters < heads) load_share<T, kThreads>(HeadShare<T>(b, index + clusters, ctas, rank), held);
  }
#endif
}

// The cluster shape of a batch: blocks per cluster and threads per block.
struct StreamShape {
  int ctas, threads;
};

StreamShape stream_shape(const QuantizeHeadsParams& b) {
  int64_t vectors = 0;  // of the largest head
  for (int t = 0; t < b.count; ++t) {
    const QuantizeParams& p = b.tensors[t];
    const int64_t value_bytes = p.x_type == InputType::kFloat32 ? 4 : 2;
    vectors = std::max(vectors, static_cast<int64_t>(p.rows) * p.cols * value_bytes / 16);
  }
  const bool wide = vectors * 16 <= kPairedHeadBytes || vectors * 16 > kMaxStreamCtas * kShareBytes;
  const int threads = wide ? 2 * kQuantThreads : kQuantThreads;
  const int64_t block_vectors = int64_t{threads} * kHeldPerThread;
  return {static_cast<int>(std::max<int64_t>((vectors + block_vectors - 1) / block_vectors, 1)), threads};
}

// Calls f(std::integral_constant<int, threads>) for the shape's threads a block.
template <class F>
cudaError_t with_threads(const StreamShape& shape, F&& f) {
  if (shape.threads == 2 * kQuantThreads) return f(std::integral_constant<int, 2 * kQuantThreads>());
  return f(std::integral_constant<int, kQuantThreads>());
}

// Clusters of this shape the current device runs at once (0: none), asked once per device, input type and shape.
template <typename T, int kThreads>
int resident_clusters(int ctas) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, ctas);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const auto kernel = quantize_stream_kernel<T, kThreads>;
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t config = cluster_launch_config(ctas, ctas, 0, nullptr, attrs, kThreads);
  int clusters = 0;
  const bool asked =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
      cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess;
  cudaGetLastError();  // a refusal above is an answer, not an error of a launch
  return known[key] = asked ? clusters : 0;
}

int resident_clusters_of(const QuantizeHeadsParams& b, const StreamShape& shape) {
  int clusters = 0;
  with_input_type(b.tensors[0].x_type, [&](auto value) {
    return with_threads(shape, [&](auto threads) {
      clusters = resident_clusters<decltype(value), decltype(threads)::value>(shape.ctas);
      return cudaSuccess;
    });
  });
  return clusters;
}

}  // namespace

// Heads up to 16 shares of 64 KB (1 MB: 2048 x 256 or 4096 x 128 in fp16). Shares of 64 KB against two
// passes, q, k and v, graph us, H100, 2026-11-27, two alternating runs: 4x16x2048x256 143.8 / 205.9, 8x16x2048x256
// 268.9 / 382.5, 4x16x1536x256 106.1 / 164.5, 1x16x2048x256 46.6 / 57.1, 2x16x4096x128 76.5 / 107.1. Larger shares
// were slower than two passes: at 1x16x8192x128 (128 KB a block, one block per SM) 131.4 against 115.8 us.
bool quantize_heads_by_stream(const QuantizeHeadsParams& b, int sm) {
  const StreamShape shape = stream_shape(b);
  return sm >= 90 && b.vectorized && !quantize::smooths(b) && shape.ctas <= kMaxStreamCtas &&
         resident_clusters_of(b, shape) > 0;
}

cudaError_t launch_quantize_heads_stream(const QuantizeHeadsParams& b, cudaStream_t stream) {
  const StreamShape shape = stream_shape(b);
  const int resident = resident_clusters_of(b, shape), heads = b.first_block[b.count];
  if (resident <= 0) return cudaErrorInvalidConfiguration;
  // Every resident cluster, not as many as take the heads in the fewest turns (26 of 5 heads instead of 28 for 128
  // heads): k and v, graph us, H200: 4x16x2048x128 29.3 against 30.5, 4x16x2048x64 16.0 against 19.1.
  const int clusters = std::min(resident, heads);
  return with_input_type(b.tensors[0].x_type, [&](auto value) {
    return with_threads(shape, [&](auto threads) {
      constexpr int kThreads = decltype(threads)::value;
      cudaLaunchAttribute attrs[2];
      cudaLaunchConfig_t config =
          cluster_launch_config(clusters * shape.ctas, shape.ctas, 0, stream, attrs, kThreads);
      return cudaLaunchKernelEx(&config, quantize_stream_kernel<decltype(value), kThreads>, b);
    });
  });
}

}  // namespace sdpa
