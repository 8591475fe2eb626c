// Per-head E4M3 quantization: an amax pass and an encode pass, `chunks` blocks per head each.
//
// Pass 1 writes one partial amax per block; pass 2 reduces its head's partials (at most kMaxChunks, one warp),
// derives scale = amax / 448 exactly as torch does, and encodes its slice. No atomics and no memset, so the
// result is deterministic and two launches capture cleanly in a CUDA graph.
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
#include "encode.cuh"

namespace sdpa {
namespace {

constexpr int kQuantThreads = 256;
constexpr int kMaxChunks = 64;
constexpr int kElementsPerThread = 8;  // aim for at least this much work per thread before adding blocks

// The rows of one head that block (head, chunk) covers, in vectors of kVec elements, and how to address them.
template <int kVec>
struct Slice {
  int head, chunk, row_begin, vectors, vectors_per_row;
  int64_t x_offset;  // of the head's first element

  __device__ explicit Slice(const QuantizeParams& p) {
    head = blockIdx.x / p.chunks;
    chunk = blockIdx.x % p.chunks;
    const int rows_per_chunk = (p.rows + p.chunks - 1) / p.chunks;
    row_begin = min(p.rows, chunk * rows_per_chunk);
    vectors_per_row = p.cols / kVec;
    vectors = (min(p.rows, row_begin + rows_per_chunk) - row_begin) * vectors_per_row;
    x_offset = (head / p.heads) * p.x_batch_stride + (head % p.heads) * p.x_head_stride;
  }
  __device__ int row(int i) const { return row_begin + i / vectors_per_row; }
  __device__ int col(int i) const { return i % vectors_per_row * kVec; }
  template <typename T>
  __device__ void load(const QuantizeParams& p, int i, float (&x)[kVec]) const {
    load_values<T, kVec>(static_cast<const T*>(p.x) + x_offset + row(i) * p.x_row_stride + col(i) * p.x_col_stride, x);
  }
};

__device__ __forceinline__ float block_max(float x) {
  __shared__ float warp_max[kQuantThreads / 32];
  x = group_max<32>(x);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = x;
  __syncthreads();
  x = threadIdx.x < kQuantThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
  return group_max<32>(x);  // valid in warp 0
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kQuantThreads) amax_kernel(const QuantizeParams p) {
  const Slice<kVec> s(p);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < s.vectors; i += kQuantThreads) {
    float x[kVec];
    s.template load<T>(p, i, x);
#pragma unroll
    for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(x[e]));
  }
  amax = block_max(amax);
  if (threadIdx.x == 0) p.partial_amax[blockIdx.x] = amax;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kQuantThreads) encode_kernel(const QuantizeParams p) {
  const Slice<kVec> s(p);
  __shared__ float head_scale;
  if (threadIdx.x < 32) {
    float amax = 0.0f;
    if (p.given_scale == nullptr) {
      for (int i = threadIdx.x; i < p.chunks; i += 32) amax = fmaxf(amax, p.partial_amax[s.head * p.chunks + i]);
      amax = group_max<32>(amax);
    }
    if (threadIdx.x == 0) head_scale = p.given_scale != nullptr ? p.given_scale[s.head] : scale_from_amax(amax);
  }
  __syncthreads();
  const float scale = head_scale;
  if (s.chunk == 0 && threadIdx.x == 0) p.scale[s.head] = scale;

  uint8_t* codes = p.codes + static_cast<int64_t>(s.head) * p.rows * p.cols;
  for (int i = threadIdx.x; i < s.vectors; i += kQuantThreads) {
    float x[kVec];
    s.template load<T>(p, i, x);
    store_codes<kVec>(codes + static_cast<int64_t>(s.row(i)) * p.cols + s.col(i), x, scale);
  }
}

template <typename T, int kVec>
cudaError_t launch_two_pass(const QuantizeParams& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.batch) * p.heads * p.chunks);
  if (p.given_scale == nullptr) {
    amax_kernel<T, kVec><<<blocks, kQuantThreads, 0, stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  encode_kernel<T, kVec><<<blocks, kQuantThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// Vectorized rows: 16-byte loads and 4- or 8-byte code stores (4x16x2048x128 q, k and v in fp16 took 307 us with
// one element per load and store on an H200).
template <typename T>
cudaError_t launch_typed(const QuantizeParams& p, cudaStream_t stream) {
  return p.vectorized ? launch_two_pass<T, 16 / sizeof(T)>(p, stream) : launch_two_pass<T, 1>(p, stream);
}

// The index of the tensor whose heads include head `index` of all tensors.
__device__ __forceinline__ int tensor_of(const QuantizeHeadsParams& b, int index) {
  int t = 0;
  while (t + 1 < b.count && index >= b.first_block[t + 1]) ++t;
  return t;
}

constexpr int kHeadThreads = 512;

// The whole-head kernel: one block per head of any of the tensors. Loads go through shared memory once, so the
// head is read from global memory a single time (the two-pass kernels read it twice).
template <typename T, int kVec>
__global__ void __launch_bounds__(kHeadThreads) quantize_heads_kernel(const QuantizeHeadsParams b) {
  using Vec = typename std::conditional<kVec == 1, T, uint4>::type;  // kVec values of T per load
  extern __shared__ __align__(16) unsigned char head_smem[];
  T* values = reinterpret_cast<T*>(head_smem);
  const int t = tensor_of(b, blockIdx.x);
  const QuantizeParams& p = b.tensors[t];
  const int head = blockIdx.x - b.first_block[t];
  const T* x = static_cast<const T*>(p.x) + (head / p.heads) * p.x_batch_stride + (head % p.heads) * p.x_head_stride;
  const int vecs_per_row = p.cols / kVec, vecs = p.rows * vecs_per_row;

  float amax = 0.0f;
#pragma unroll 4
  for (int i = threadIdx.x; i < vecs; i += kHeadThreads) {
    const int row = i / vecs_per_row, col = i % vecs_per_row * kVec;
    const Vec v = *reinterpret_cast<const Vec*>(x + row * p.x_row_stride + col * p.x_col_stride);
    reinterpret_cast<Vec*>(values)[i] = v;
    const T* elems = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(to_float(elems[e])));
  }
  __shared__ float warp_max[kHeadThreads / 32];
  amax = group_max<32>(amax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();  // also publishes the staged values
  __shared__ float head_scale;
  if (threadIdx.x < 32) {
    amax = group_max<32>(threadIdx.x < kHeadThreads / 32 ? warp_max[threadIdx.x] : 0.0f);
    if (threadIdx.x == 0) {
      head_scale = p.given_scale != nullptr ? p.given_scale[head] : scale_from_amax(amax);
      p.scale[head] = head_scale;
    }
  }
  __syncthreads();
  const float scale = head_scale;
  uint8_t* codes = p.codes + static_cast<int64_t>(head) * p.rows * p.cols;
  for (int i = threadIdx.x; i < vecs; i += kHeadThreads) {
    float x[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = to_float(values[i * kVec + e]);
    store_codes<kVec>(codes + i * kVec, x, scale);
  }
}

template <typename T>
cudaError_t launch_heads_typed(const QuantizeHeadsParams& b, cudaStream_t stream) {
  const int smem = static_cast<int>(quantize_heads_smem_bytes(b));
  const unsigned blocks = static_cast<unsigned>(b.first_block[b.count]);
  auto launch = [&](auto kernel) {
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        err != cudaSuccess) {
      return err;
    }
    kernel<<<blocks, kHeadThreads, smem, stream>>>(b);
    return cudaGetLastError();
  };
  if (b.vectorized) return launch(quantize_heads_kernel<T, 16 / sizeof(T)>);
  return launch(quantize_heads_kernel<T, 1>);
}

// The cluster kernel (sm_90): a cluster of blocks per head, each holding its share of the head in registers (at
// most kHeldVectors 16-byte vectors per thread). The blocks' amaxes meet through distributed shared memory, so
// the head is read once and no block waits on another launch. At 1x8x512x64 the one-block-per-head kernel ran 24
// blocks for 3 x 8 heads and took 6.5 us on an H200, most of it one block streaming 64 KB. Clusters of 16 blocks
// (a non-portable size, where the GPU runs it) instead of 8, each thread then holding one vector instead of two:
// 3.5-3.7 against 4.2 us per call for q, k and v at 1x8x512x64, end to end 9.0-9.1 against 9.5 us (H200, CUDA-graph
// replay, two runs each). Letting the next kernel launch only after the amax (instead of at the start) did not
// help: 3.9 us.
constexpr int kMinClusterCtas = 8, kMaxClusterCtas = 16, kClusterThreads = kQuantThreads, kHeldVectors = 8;

template <typename T>
__global__ void __launch_bounds__(kClusterThreads) quantize_heads_cluster_kernel(const QuantizeHeadsParams b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kVec = 16 / sizeof(T);
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int index = blockIdx.x / ctas;
  const int t = tensor_of(b, index);
  const QuantizeParams& p = b.tensors[t];
  const int head = index - b.first_block[t];
  const T* x = static_cast<const T*>(p.x) + (head / p.heads) * p.x_batch_stride + (head % p.heads) * p.x_head_stride;
  const int vecs_per_row = p.cols / kVec, vecs = p.rows * vecs_per_row;
  const int per_block = (vecs + ctas - 1) / ctas;
  const int begin = rank * per_block, end = min(vecs, begin + per_block);
  allow_next_grid_launch();
  wait_for_previous_grids();  // launched overlapping the previous kernel (sm_90), which may write x

  uint4 held[kHeldVectors];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) {
    const int i = begin + threadIdx.x + j * kClusterThreads;
    if (i < end) {
      held[j] = *reinterpret_cast<const uint4*>(x + (i / vecs_per_row) * p.x_row_stride + i % vecs_per_row * kVec);
      const T* elems = reinterpret_cast<const T*>(&held[j]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(to_float(elems[e])));
    }
  }
  __shared__ float block_amax, head_scale;
  amax = block_max(amax);
  if (threadIdx.x == 0) block_amax = amax;
  cluster.sync();  // every block's amax is in its shared memory
  if (threadIdx.x < 32) {
    amax = threadIdx.x < ctas ? *cluster.map_shared_rank(&block_amax, threadIdx.x) : 0.0f;
    amax = group_max<32>(amax);
    if (threadIdx.x == 0) {
      head_scale = scale_from_amax(amax);
      if (rank == 0) p.scale[head] = head_scale;
    }
  }
  // Done reading the other blocks' shared memory: a block may leave once all have arrived (checked at the end).
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  __syncthreads();
  const float scale = head_scale;
  uint8_t* codes = p.codes + static_cast<int64_t>(head) * vecs * kVec;
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) {
    const int i = begin + threadIdx.x + j * kClusterThreads;
    if (i < end) {
      float values[kVec];
      const T* elems = reinterpret_cast<const T*>(&held[j]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) values[e] = to_float(elems[e]);
      store_codes<kVec>(codes + static_cast<int64_t>(i) * kVec, values, scale);
    }
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// kMaxClusterCtas where the GPU can run clusters that large of this kernel, else kMinClusterCtas; asked once per
// device.
template <typename T>
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
        cudaFuncSetAttribute(quantize_heads_cluster_kernel<T>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, quantize_heads_cluster_kernel<T>, &config) == cudaSuccess &&
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

template <typename T>
cudaError_t launch_heads_cluster_typed(const QuantizeHeadsParams& b, bool fewest, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kClusterThreads);
  config.stream = stream;
  const int ctas = fewest ? fewest_ctas(b, cluster_ctas<T>(config)) : cluster_ctas<T>(config);
  config.gridDim = dim3(static_cast<unsigned>(b.first_block[b.count]) * ctas);
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = ctas;
  attrs[0].val.clusterDim.y = attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;  // see wait_for_previous_grids
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attrs;
  config.numAttrs = 2;
  return cudaLaunchKernelEx(&config, quantize_heads_cluster_kernel<T>, b);
}

// The blocks of the largest cluster the cluster kernel runs with on this device.
int largest_cluster(InputType type) {
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kClusterThreads);
  switch (type) {
    case InputType::kFloat32:
      return cluster_ctas<float>(config);
    case InputType::kFloat16:
      return cluster_ctas<__half>(config);
    default:
      return cluster_ctas<__nv_bfloat16>(config);
  }
}

}  // namespace

// Heads up to what 16 blocks hold (512 KB of fp16: 2048 x 128) where the GPU runs 16-block clusters: read once,
// where two passes read them twice. q, k and v at 4x16x2048x128 in fp16: 98.2 against 123.0 us (graph replay, H100,
// one run; the one-read floor is 50.7 us).
bool quantize_heads_by_cluster(const QuantizeHeadsParams& b, int sm) {
  // The grid is up to kMaxClusterCtas blocks per head, and grid.x is at most 2^31 - 1.
  if (sm < 90 || !b.vectorized || b.first_block[b.count] > INT_MAX / kMaxClusterCtas) return false;
  const int64_t most_vectors = largest_cluster(b.tensors[0].x_type) * kBlockVectors;
  for (int t = 0; t < b.count; ++t) {
    if (head_vectors(b.tensors[t]) > most_vectors) return false;
  }
  return true;
}

cudaError_t launch_quantize_heads_cluster(const QuantizeHeadsParams& b, bool fewest_blocks, cudaStream_t stream) {
  return with_input_type(b.tensors[0].x_type, [&](auto value) {
    return launch_heads_cluster_typed<decltype(value)>(b, fewest_blocks, stream);
  });
}

int64_t quantize_heads_smem_bytes(const QuantizeHeadsParams& b) {
  int64_t bytes = 0;
  for (int t = 0; t < b.count; ++t) {
    const int64_t element = b.tensors[t].x_type == InputType::kFloat32 ? 4 : 2;
    bytes = std::max(bytes, element * b.tensors[t].rows * b.tensors[t].cols);
  }
  return bytes;
}

cudaError_t launch_quantize_heads(const QuantizeHeadsParams& b, cudaStream_t stream) {
  return with_input_type(b.tensors[0].x_type, [&](auto value) { return launch_heads_typed<decltype(value)>(b, stream); });
}

int quantize_chunks(const QuantizeParams& p) {
  const int64_t per_head = static_cast<int64_t>(p.rows) * p.cols;
  const int64_t wanted = (per_head + kQuantThreads * kElementsPerThread - 1) / (kQuantThreads * kElementsPerThread);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, kMaxChunks, p.rows})));
}

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  return with_input_type(p.x_type, [&](auto value) { return launch_typed<decltype(value)>(p, stream); });
}

}  // namespace sdpa
