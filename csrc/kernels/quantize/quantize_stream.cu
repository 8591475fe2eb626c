// The streaming quantizer (sm_90): a persistent grid of thread-block clusters that take the heads of q, k and v in
// turn, one head per cluster at a time, each head read from global memory once.
//
// A block stages its share of the head in shared memory by cp.async, every thread its own 16-byte vectors, so the
// staged values need no barrier. The blocks of a cluster meet once per head, through distributed shared memory, for
// the head's amax. While a block encodes a head it already loads its share of the cluster's next head into the
// vectors it has just encoded: the loads of one head overlap the encode of the one before, and the clusters are
// launched once, not once per head (the cluster kernel, quantize_cluster.cu, launches a cluster per head and holds
// its share in registers).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

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
using quantize::tensor_of;
using quantize::vector_amax;
using quantize::write_block_amax;

// A block's share of a head: as few blocks as keep it within kShareBytes, so that several blocks (of different
// clusters) share an SM and one's loads run while another waits at its cluster barrier; heads beyond kMaxStreamCtas
// shares take larger shares, up to kMaxShareBytes (three blocks an SM), and beyond those other kernels
// (quantize_heads_by_stream). Heads up to kPairedHeadBytes take two shares of up to kMaxShareBytes instead: q, k
// and v in fp16, graph us, standalone (scripts/bench_quantize_stream.cu), 32 KB shares / two shares: H200
// 4x16x385x128 15.3 / 9.6, 8x16x1024x64 26.7 / 24.5, 16x16x1024x64 44.9 / 43.4; H100 15.1 / 10.3, 32.1 / 30.6,
// 57.6 / 57.1. Larger heads lost with 64 KB shares (H200: 4x16x2048x64 26.9 / 29.2, 2x8x1024x256 16.5 / 17.0) and
// with 40 or 48 KB ones.
constexpr int kMaxStreamCtas = 16;
constexpr int64_t kShareBytes = 32 * 1024, kMaxShareBytes = 64 * 1024, kPairedHeadBytes = 2 * kMaxShareBytes;

// The 16-byte vectors of head `index` (of all the tensors) that cluster block `rank` of `ctas` stages: vectors
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

// Where this thread's vectors of a share are in global memory: vectors k = threadIdx.x + j kQuantThreads, the j-th
// `step` values after the first where a row's vectors divide the block's threads (16-bit rows of 8 to 2048 values
// in powers of two), else HeadShare::vector(k): one add a vector instead of an integer division and two 64-bit
// multiplies.
template <typename T>
struct ThreadVectors {
  const T* first;
  int64_t step;
  bool stepped;

  __device__ explicit ThreadVectors(const HeadShare<T>& share) {
    const int i = share.begin + threadIdx.x;
    first = share.x + static_cast<int64_t>(i / share.vecs_per_row) * share.p->x_row_stride +
            i % share.vecs_per_row * HeadShare<T>::kVec;
    stepped = quantize::steps_whole_rows(share.vecs_per_row);
    step = quantize::row_step(share.vecs_per_row, share.p->x_row_stride);
  }
  // Vector k = threadIdx.x + j kQuantThreads of the share, which is `at` (first + j step) where stepped.
  __device__ const T* vector(const HeadShare<T>& share, int k, const T* at) const {
    return stepped ? at : share.vector(k);
  }
};

// Starts the copies of the block's share of a head into `staged`, as one cp.async group.
template <typename T>
__device__ __forceinline__ void stage_share(const HeadShare<T>& share, uint4* staged) {
  const ThreadVectors<T> from(share);
  const T* src = from.first;
  for (int k = threadIdx.x; k < share.count; k += kQuantThreads, src += from.step) {
    cp_async_16(staged + k, from.vector(share, k, src), true);
  }
  cp_async_commit();
}

// The addressing above, 16-byte shared loads in the amax loop (where a uint4 read as 16-bit pairs became four
// 4-byte loads 16 bytes apart across a warp, each a 4-way bank conflict: 25% of the kernel's shared wavefronts were
// excess) and the next head's addresses worked out before the barrier (below) took the kernel from 172 to 145
// instructions issued per 16-byte vector and from 53% to 66% of the DRAM's peak (ncu, 4x16x2048x128). q, k and v in
// fp16, graph us, H100, standalone build of the kernel, median of three runs, before / after: 4x16x2048x128 62.7 /
// 58.2 (a plain cast of the same bytes, with no amax: 53.3), 4x16x2048x64 34.8 / 32.1 (26.1), 4x32x2048x128 114.2 /
// 107.9, 2x16x4096x128 61.2 / 58.0, 4x16x2048x256 116.6 / 110.8, 8x16x1024x128 62.6 / 61.5. Copying the next head's
// first half into a third slot before the cluster barrier had taken the kernel before from 60.4 to 58.0 us at
// 4x16x2048x128; after, it saved nothing there (58.0 / 58.2) and cost 4% at 4x32x2048x128 (112.2 / 107.8), its 49 KB
// blocks and 57 registers leaving four blocks an SM instead of five.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads) quantize_stream_kernel(const QuantizeHeadsParams b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kVec = HeadShare<T>::kVec;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int clusters = static_cast<int>(gridDim.x) / ctas, heads = b.first_block[b.count];
  extern __shared__ __align__(16) uint4 staged[];  // the block's share of the head, vector k at staged[k]
  // Every block's amax of a head (write_block_amax, cluster_amax), by the parity of the cluster's head count: a block
  // writes a parity again only after the next head's cluster barrier, which every block reaches after reading this
  // head's amaxes. Reading the other blocks' amax after the barrier instead (a round trip through distributed shared
  // memory per head, then a block barrier, and a cluster barrier before any block leaves) took more: graph us for q, k
  // and v, H100, same run, read / written: 75.6 / 67.1 at 4x16x2048x128 fp16, 42.3 / 36.8 at 4x16x2048x64, 139.5 /
  // 122.4 at 4x32x2048x128, 141.3 / 125.3 at 4x16x2048x256; bf16 83.4 / 79.3 at 4x16x2048x128.
  __shared__ float share_amax[2][kMaxStreamCtas];
  arrive_cluster_start();
  allow_next_grid_launch();
  wait_for_previous_grids();  // launched overlapping the previous kernel, which may write the inputs
  int index = static_cast<int>(blockIdx.x) / ctas;
  if (index < heads) stage_share(HeadShare<T>(b, index, ctas, rank), staged);
  wait_cluster_start();  // while the first share lands
  for (int n = 0; index < heads; ++n, index += clusters) {
    const HeadShare<T> share(b, index, ctas, rank);
    // The next head's share and addresses while this one's copies land: worked out after the barrier, they held up
    // the encode and the next copies (60.5 against 58.2 us at 4x16x2048x128, 63.9 against 61.5 at 8x16x1024x128).
    const int next = index + clusters;
    const HeadShare<T> after(b, next < heads ? next : index, ctas, rank);
    const int after_count = next < heads ? after.count : 0;
    const ThreadVectors<T> from(after);
    cp_async_wait<0>();  // this thread's vectors of the head (it reads only those before the barrier below)
    float amax = 0.0f;
    for (int k = threadIdx.x; k < share.count; k += kQuantThreads) {
      amax = fmaxf(amax, vector_amax<T>(load_shared_16(staged + k)));
    }
    amax = block_max(amax);
    write_block_amax(cluster, share_amax[n % 2], ctas, rank, amax);
    cluster.sync();  // every block's amax of the head is in this block's shared memory
    const E4m3Divisor scale(scale_from_amax(cluster_amax(share_amax[n % 2], ctas)), /*bounds_values=*/true);
    if (rank == 0 && threadIdx.x == 0) share.p->scale[share.head] = scale.scale;
    // Each vector, once encoded, makes room for the same vector of the next head's share: the thread's own, which
    // it has just read. (Two buffers, the next head's copies started before this head's amax, took 91.5 against
    // 87.9 us at 4x16x2048x128 and 166.4 against 154.4 at 4x32x2048x128: fewer blocks fit an SM.)
    const T* src = from.first;
    uint8_t* codes = share.codes(threadIdx.x);
    for (int k = threadIdx.x; k < max(share.count, after_count);
         k += kQuantThreads, src += from.step, codes += kQuantThreads * kVec) {
      if (k < share.count) {
        // One 16-byte load (element by element ptxas kept eight 2-byte loads for bf16), before the copy that
        // overwrites it.
        const uint4 vector = load_shared_16(staged + k);
        const T* elems = reinterpret_cast<const T*>(&vector);
        float values[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) values[e] = to_float(elems[e]);
        store_codes<kVec>(codes, values, scale);
      }
      if (k < after_count) cp_async_16(staged + k, from.vector(after, k, src), true);
    }
    cp_async_commit();
  }
#endif
}

// The cluster shape of a batch: blocks per cluster and the shared memory each stages.
struct StreamShape {
  int ctas;
  int64_t smem_bytes;
};

StreamShape stream_shape(const QuantizeHeadsParams& b) {
  int64_t vectors = 0;  // of the largest head
  for (int t = 0; t < b.count; ++t) {
    const QuantizeParams& p = b.tensors[t];
    const int64_t value_bytes = p.x_type == InputType::kFloat32 ? 4 : 2;
    vectors = std::max(vectors, static_cast<int64_t>(p.rows) * p.cols * value_bytes / 16);
  }
  const int64_t share = vectors * 16 <= kPairedHeadBytes ? kMaxShareBytes : kShareBytes;
  const int64_t ctas = std::clamp<int64_t>((vectors * 16 + share - 1) / share, 1, kMaxStreamCtas);
  return {static_cast<int>(ctas), (vectors + ctas - 1) / ctas * 16};
}

cudaLaunchConfig_t stream_config(const StreamShape& shape, cudaStream_t stream, cudaLaunchAttribute (&attrs)[2]) {
  return cluster_launch_config(shape.ctas, shape.ctas, static_cast<size_t>(shape.smem_bytes), stream, attrs);
}

// Clusters of this shape the current device runs at once (0: none), asked once per device, input type and shape.
template <typename T>
int resident_clusters(const StreamShape& shape) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int64_t>, int> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, shape.ctas, shape.smem_bytes);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const auto kernel = quantize_stream_kernel<T>;
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t config = stream_config(shape, nullptr, attrs);
  // The kernel may take what a block may have beside its static shared memory: each launch asks for its own
  // shape's part of it.
  cudaFuncAttributes attributes = {};
  int most_smem = 0, clusters = 0;
  const bool asked =
      cudaDeviceGetAttribute(&most_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
      cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
      (most_smem -= static_cast<int>(attributes.sharedSizeBytes)) >= shape.smem_bytes &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most_smem) == cudaSuccess &&
      cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess;
  cudaGetLastError();  // a refusal above is an answer, not an error of a launch
  return known[key] = asked ? clusters : 0;
}

int resident_clusters_of(const QuantizeHeadsParams& b, const StreamShape& shape) {
  int clusters = 0;
  with_input_type(b.tensors[0].x_type, [&](auto value) {
    clusters = resident_clusters<decltype(value)>(shape);
    return cudaSuccess;
  });
  return clusters;
}

}  // namespace

// Heads up to 16 shares of kMaxShareBytes (1 MB: 2048 x 256 or 4096 x 128 in fp16). Shares of 64 KB against two
// passes, q, k and v, graph us, H100, 2026-11-27, two alternating runs: 4x16x2048x256 143.8 / 205.9, 8x16x2048x256
// 268.9 / 382.5, 4x16x1536x256 106.1 / 164.5, 1x16x2048x256 46.6 / 57.1, 2x16x4096x128 76.5 / 107.1. Larger shares
// were slower than two passes: at 1x16x8192x128 (128 KB a block, one block per SM) 131.4 against 115.8 us.
bool quantize_heads_by_stream(const QuantizeHeadsParams& b, int sm) {
  const StreamShape shape = stream_shape(b);
  return sm >= 90 && b.vectorized && !quantize::smooths(b) && shape.smem_bytes <= kMaxShareBytes &&
         resident_clusters_of(b, shape) > 0;
}

cudaError_t launch_quantize_heads_stream(const QuantizeHeadsParams& b, cudaStream_t stream) {
  const StreamShape shape = stream_shape(b);
  const int resident = resident_clusters_of(b, shape), heads = b.first_block[b.count];
  if (resident <= 0) return cudaErrorInvalidConfiguration;
  // As many clusters as take the heads in the fewest turns: at 192 heads and 33 resident clusters, 32 of 6 heads.
  const int turns = (heads + resident - 1) / resident, clusters = (heads + turns - 1) / turns;
  return with_input_type(b.tensors[0].x_type, [&](auto value) {
    using T = decltype(value);
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t config = stream_config(shape, stream, attrs);
    config.gridDim = dim3(static_cast<unsigned>(clusters * shape.ctas));
    return cudaLaunchKernelEx(&config, quantize_stream_kernel<T>, b);
  });
}

}  // namespace sdpa
