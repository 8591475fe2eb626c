// Does fence.proxy.async (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S on sm_90a) wait for copies still in flight? Each
// block brings 16 KB of cold data into shared memory, stores to shared memory, then times the fence with clock64
// (thread 0): mode 0 after cp.async.wait_all (nothing in flight), mode 1 with every thread's cp.async copies in
// flight, mode 2 with one cp.async.bulk (TMA's proxy) in flight; then the wait for the copies. H200, 2026-11-28:
// the fence took 14 cycles with nothing in flight, 17-21 with either kind of copy in flight, whose wait then took
// 2000-2500 cycles: it does not wait for them (decode_warpgroup.cuh's fence after the refill costs nothing).
//   nvcc -arch=sm_90a -O3 -o /tmp/probe_proxy_fence scripts/probe_proxy_fence.cu && /tmp/probe_proxy_fence
#include <cstdint>
#include <cstdio>
__device__ __forceinline__ uint32_t sa(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
template <int kMode>
__global__ void probe(const uint4* src, long long* cycles) {
  __shared__ __align__(128) uint4 codes[8 * 128];
  __shared__ __align__(128) uint4 halves[128];
  __shared__ __align__(8) uint64_t bar;
  const uint4* base = src + static_cast<long long>(blockIdx.x) * 8 * 128;
  if (kMode == 2) {
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(sa(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(sa(&bar)), "r"(16384) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                       sa(codes)), "l"(base), "r"(16384), "r"(sa(&bar)) : "memory");
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa(&codes[j * 128 + threadIdx.x])),
                   "l"(base + j * 128 + threadIdx.x));
    }
    asm volatile("cp.async.commit_group;\n");
    if (kMode == 0) asm volatile("cp.async.wait_all;\n" ::: "memory");
  }
  halves[threadIdx.x] = make_uint4(threadIdx.x, 1, 2, 3);
  const long long t0 = clock64();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  const long long t1 = clock64();
  if (kMode == 2) {
    asm volatile(
        "{\n .reg .pred done;\n wait:\n mbarrier.try_wait.parity.shared.b64 done, [%0], 0;\n @!done bra wait;\n}\n" ::"r"(
            sa(&bar)) : "memory");
  } else {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  }
  const long long t2 = clock64();
  __syncthreads();
  if (threadIdx.x == 0) {
    cycles[2 * blockIdx.x] = t1 - t0;
    cycles[2 * blockIdx.x + 1] = t2 - t1 + (codes[5].x + halves[7].y == 12345 ? 1 : 0);
  }
}
int main() {
  const int blocks = 132;
  const size_t bytes = size_t(64) << 20;  // more than the 50-60 MB L2: a memset in between evicts the last rep's
  uint4* src;
  long long* cycles;
  cudaMalloc(&src, bytes);
  cudaMalloc(&cycles, blocks * 2 * sizeof(long long));
  long long host[2 * blocks];
  const char* names[3] = {"nothing in flight   ", "cp.async in flight  ", "cp.async.bulk in flight"};
  for (int mode = 0; mode < 3; ++mode) {
    for (int rep = 0; rep < 3; ++rep) {
      cudaMemset(src, rep, bytes);
      const uint4* s = src + rep * blocks * 8 * 128;
      if (mode == 0) probe<0><<<blocks, 128>>>(s, cycles);
      if (mode == 1) probe<1><<<blocks, 128>>>(s, cycles);
      if (mode == 2) probe<2><<<blocks, 128>>>(s, cycles);
      cudaMemcpy(host, cycles, sizeof(host), cudaMemcpyDeviceToHost);
      long long fence = 0, wait = 0;
      for (int b = 0; b < blocks; ++b) fence += host[2 * b], wait += host[2 * b + 1];
      printf("%s rep %d: fence %lld cycles, then the wait for the copies %lld (means over blocks)\n", names[mode], rep,
             fence / blocks, wait / blocks);
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) printf("error: %s\n", cudaGetErrorString(err));
  return err != cudaSuccess;
}
