// What the TMA probes share (probe_sm_bandwidth.cu, probe_tile_quantizer.cu): a ring of slots filled by bulk copies,
// the amax and the E4M3 codes of fp16 vectors, and the median event time of a launch with L2 flushed. The mbarrier,
// named-barrier and warp-reduction helpers are the kernels' own (build with -I csrc/kernels -arch=sm_90a).
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common/attention_common.cuh"
#include "hopper/hopper.cuh"

using sdpa::barrier_sync;
using sdpa::fence_mbarrier_init;
using sdpa::group_max;
using sdpa::mbarrier_arrive_expect_bytes;
using sdpa::mbarrier_init;
using sdpa::mbarrier_wait;
using sdpa::smem_address;

// A plain arrival on an mbarrier: a consumer hands its slot back to the copier.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// `bytes` bytes from global memory into shared memory by one TMA bulk copy, announced on and counted down on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, int bytes, uint64_t* bar) {
  mbarrier_arrive_expect_bytes(bar, bytes);
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_address(dst)),
               "l"(src), "r"(bytes), "r"(smem_address(bar))
               : "memory");
}
// Thread 0: for each slot of a ring, full[s] (one arrival and the copy's bytes) and empty[s] (`consumers` arrivals).
__device__ __forceinline__ void init_ring(uint64_t* full, uint64_t* empty, int slots, int consumers) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], consumers);
    }
    fence_mbarrier_init();
  }
}
// One thread: each head of this block (blockIdx.x, + gridDim.x, ...) of `heads` heads of head_elems fp16 values,
// `passes` times over, in chunks of chunk_bytes into the ring's `slots` slots in turn, each once its consumers freed
// it.
__device__ __forceinline__ void copy_heads(const half* x, int heads, int64_t head_elems, int chunk_bytes, int passes,
                                           char* ring, uint64_t* full, uint64_t* empty, int slots) {
  const int chunks = static_cast<int>(head_elems * 2 / chunk_bytes);
  int n = 0;
  for (int h = blockIdx.x; h < heads; h += gridDim.x) {
    for (int p = 0; p < passes; ++p) {
      for (int c = 0; c < chunks; ++c, ++n) {
        const int s = n % slots;
        if (n >= slots) mbarrier_wait(&empty[s], (n / slots - 1) & 1);
        const char* src = reinterpret_cast<const char*>(x + h * head_elems) + static_cast<int64_t>(c) * chunk_bytes;
        bulk_load(ring + s * chunk_bytes, src, chunk_bytes, &full[s]);
      }
    }
  }
}

// The running pairwise max of |value| over the 8 fp16 values of `values` (converted to float once, at the end).
__device__ __forceinline__ __half2 max_abs_pairs(__half2 running, const uint4& values) {
  const __half2* pairs = reinterpret_cast<const __half2*>(&values);
  for (int e = 0; e < 4; ++e) running = __hmax2(running, __habs2(pairs[e]));
  return running;
}

// The E4M3 codes of 8 fp16 values times `inverse` (a power of two: the products are exact), 4 to a word.
__device__ __forceinline__ uint2 e4m3_times(const uint4& values, __half2 inverse) {
  const __half2* pairs = reinterpret_cast<const __half2*>(&values);
  uint32_t words[2];
  for (int w = 0; w < 2; ++w) {
    __half2 lo = __hmul2(pairs[2 * w], inverse), hi = __hmul2(pairs[2 * w + 1], inverse);
    uint16_t lo_codes, hi_codes;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(lo_codes) : "r"(*reinterpret_cast<uint32_t*>(&lo)));
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(hi_codes) : "r"(*reinterpret_cast<uint32_t*>(&hi)));
    words[w] = lo_codes | (uint32_t(hi_codes) << 16);
  }
  return make_uint2(words[0], words[1]);
}

// The probes' buffers: `heads` heads of head_elems fp16 values (all 1.06), their codes, `scale_count` scales, and
// 256 MB to flush L2 with.
struct ProbeBuffers {
  half* x;
  uint8_t* codes;
  float* scales;
  void* flush;
  ProbeBuffers(int heads, int64_t head_elems, int scale_count) {
    cudaMalloc(&x, heads * head_elems * 2);
    cudaMalloc(&codes, heads * head_elems);
    cudaMalloc(&scales, scale_count * 4);
    cudaMalloc(&flush, 256 << 20);
    cudaMemset(x, 0x3c, heads * head_elems * 2);
  }
};

// The median of 7 event times (us) of launch(), each after a 256 MB memset that leaves L2 cold.
template <class Launch>
float median_us(void* flush, Launch launch) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float times[7];
  for (int r = 0; r < 7; ++r) {
    cudaMemsetAsync(flush, r, 256 << 20);
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms;
    cudaEventElapsedTime(&ms, start, stop);
    times[r] = ms * 1000;
  }
  std::sort(times, times + 7);
  return times[3];
}
