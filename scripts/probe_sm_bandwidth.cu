// How many SMs does a quantizer need to move k and v at the memory's speed? A grid of G whole-SM blocks, each a
// copier thread (TMA bulk copies of 16 KB into a ring of 12 slots) and 256 encoding threads (fp16 to E4M3 by one
// multiply and a pair conversion, 16-byte stores), takes 128 heads of 512 KB fp16 (k and v of 4x16x2048x128: 64 MB
// read, 32 MB written), block b heads b, b + G, ...: mode 0 one pass with a fixed scale, mode 1 an amax pass and
// then an encode pass that reads each head again (from L2). Median of 7 runs, L2 flushed before each, event time.
// H200, 2026-11-29 (us, TB/s of the 96 MB, SM-us = us x G):
//   mode 0: G 8 110.5 (0.91), 16 57.9 (1.74), 24 44.8, 32 33.9 (2.97, 1085 SM-us), 44 38.4, 66 33.7, 132 32.0 (4228)
//   mode 1: G 8 175.4, 16 91.5, 24 73.4, 32 54.0 (1730 SM-us), 44 46.2, 66 44.7, 132 48.0
// About 114 GB/s an SM until the memory is busy: 32 SMs move the bytes as fast as 132 (quantize_fp8_kv on every SM:
// 32.9 us). The 44-block row runs 2.9 turns of heads, uneven. Copies of 4 KB instead of 16 (a scratch variant) took
// 132.0 us against 42.5 there, and shares of every head taken by every block 49.9 against 42.5: the TMA's rate per
// SM holds for large copies only (h200-2026-11-29-quantizer-beside-kernel.md).
//   nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/probe_sm_bandwidth scripts/probe_sm_bandwidth.cu && /tmp/probe_sm_bandwidth
#include <cstdint>
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
__device__ __forceinline__ uint32_t sa(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mb_init(uint64_t* b, int n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(sa(b)), "r"(n)); }
__device__ __forceinline__ void mb_wait(uint64_t* b, int parity) {
  asm volatile("{\n .reg .pred done;\n w:\n mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n @!done bra w;\n}\n" ::"r"(sa(b)), "r"(parity) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint64_t* b) { asm volatile("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(sa(b)) : "memory"); }
constexpr int kSlots = 12, kChunk = 16384, kConsumers = 256;
template <int kMode>
__global__ void __launch_bounds__(288, 1) quant(const half* x, uint8_t* codes, float* scales, int heads, int64_t head_elems) {
  extern __shared__ __align__(1024) uint4 ring[];  // kSlots * kChunk bytes
  __shared__ uint64_t full[kSlots], empty[kSlots];
  __shared__ float warp_amax[8];
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) { mb_init(&full[s], 1); mb_init(&empty[s], 8); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int chunks = static_cast<int>(head_elems * 2 / kChunk), passes = kMode == 1 ? 2 : 1;
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      int n = 0;
      for (int h = blockIdx.x; h < heads; h += gridDim.x)
        for (int p = 0; p < passes; ++p)
          for (int c = 0; c < chunks; ++c, ++n) {
            const int s = n % kSlots;
            if (n >= kSlots) mb_wait(&empty[s], ((n / kSlots) - 1) & 1);
            asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(sa(&full[s])), "r"(kChunk) : "memory");
            const char* src = reinterpret_cast<const char*>(x + h * head_elems) + static_cast<int64_t>(c) * kChunk;
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                             sa(reinterpret_cast<char*>(ring) + s * kChunk)), "l"(src), "r"(kChunk), "r"(sa(&full[s])) : "memory");
          }
    }
    return;
  }
  const int t = threadIdx.x - 32, warp = t / 32;
  int n = 0;
  for (int h = blockIdx.x; h < heads; h += gridDim.x) {
    __half2 inv = __float2half2_rn(1.0f);
    if (kMode == 1) {
      float amax = 0.f;
      for (int c = 0; c < chunks; ++c, ++n) {
        const int s = n % kSlots;
        mb_wait(&full[s], (n / kSlots) & 1);
        const uint4* slot = ring + s * (kChunk / 16);
        __half2 m = __float2half2_rn(0.f);
        for (int j = 0; j < 4; ++j) {
          uint4 v = slot[t + j * kConsumers];
          const __half2* hv = reinterpret_cast<const __half2*>(&v);
          for (int e = 0; e < 4; ++e) m = __hmax2(m, __habs2(hv[e]));
        }
        amax = fmaxf(amax, fmaxf(__low2float(m), __high2float(m)));
        __syncwarp();
        if ((t & 31) == 0) mb_arrive(&empty[s]);
      }
      for (int o = 16; o; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
      if ((t & 31) == 0) warp_amax[warp] = amax;
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      for (int w = 0; w < 8; ++w) amax = fmaxf(amax, warp_amax[w]);
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      const float scale = fmaxf(amax, 1e-12f) / 448.f;
      if (t == 0) scales[h] = scale;
      inv = __float2half2_rn(1.f / scale);
    }
    for (int c = 0; c < chunks; ++c, ++n) {
      const int s = n % kSlots;
      mb_wait(&full[s], (n / kSlots) & 1);
      const uint4* slot = ring + s * (kChunk / 16);
      uint4 v[4];
      for (int j = 0; j < 4; ++j) v[j] = slot[2 * t + (j & 1) + (j / 2) * 2 * kConsumers];
      __syncwarp();
      if ((t & 31) == 0) mb_arrive(&empty[s]);
      uint8_t* out = codes + h * head_elems + static_cast<int64_t>(c) * (kChunk / 2);
      for (int p = 0; p < 2; ++p) {
        uint32_t w[4];
        for (int q = 0; q < 2; ++q) {
          const __half2* hv = reinterpret_cast<const __half2*>(&v[2 * p + q]);
          for (int e = 0; e < 2; ++e) {
            __half2 a = __hmul2(hv[2 * e], inv), b = __hmul2(hv[2 * e + 1], inv);
            uint16_t lo, hi;
            asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(lo) : "r"(*reinterpret_cast<uint32_t*>(&a)));
            asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(hi) : "r"(*reinterpret_cast<uint32_t*>(&b)));
            w[q * 2 + e] = lo | (uint32_t(hi) << 16);
          }
        }
        *reinterpret_cast<uint4*>(out + (2 * t + p * 2 * kConsumers) * 8) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
}
int main() {
  const int heads = 128; const int64_t elems = 2048 * 128;
  half* x; uint8_t* c; float* s;
  cudaMalloc(&x, heads * elems * 2); cudaMalloc(&c, heads * elems); cudaMalloc(&s, heads * 4);
  cudaMemset(x, 0x3c, heads * elems * 2);
  void* flush; cudaMalloc(&flush, 256 << 20);
  const int smem = kSlots * kChunk;
  cudaFuncSetAttribute(quant<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(quant<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("SMs %d; 128 heads of 512 KB fp16 -> e4m3 (64 MB read, 32 MB written)\n", sms);
  printf("%6s %5s %10s %8s %10s\n", "mode", "G", "us", "TB/s", "SM-us");
  for (int mode = 0; mode < 2; ++mode)
    for (int g : {8, 16, 24, 32, 44, 66, 132}) {
      float best[7]; int nb = 0;
      for (int r = 0; r < 7; ++r) {
        cudaMemsetAsync(flush, r, 256 << 20);  // L2 cold
        cudaEventRecord(a);
        if (mode == 0) quant<0><<<g, 288, smem>>>(x, c, s, heads, elems);
        else quant<1><<<g, 288, smem>>>(x, c, s, heads, elems);
        cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); best[nb++] = ms * 1000;
      }
      for (int i = 0; i < nb; ++i) for (int j = i + 1; j < nb; ++j) if (best[j] < best[i]) { float t = best[i]; best[i] = best[j]; best[j] = t; }
      const float us = best[nb / 2];
      printf("%6d %5d %10.1f %8.2f %10.0f\n", mode, g, us, 96.0 * (1 << 20) / us / 1e6, us * g);
    }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
