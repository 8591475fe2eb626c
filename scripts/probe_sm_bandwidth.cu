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
//   nvcc -std=c++17 -O3 -arch=sm_90a -I csrc/kernels -o /tmp/probe scripts/probe_sm_bandwidth.cu && /tmp/probe
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>

#include "probe_tma.cuh"

constexpr int kSlots = 12, kChunk = 16384, kEncoders = 256, kEncoderWarps = kEncoders / 32;

// Mode 0: one pass at scale 1; mode 1: each head's amax pass, then its encode pass by 448 / amax.
template <int kMode>
__global__ void __launch_bounds__(32 + kEncoders, 1)
    quantize_heads(const half* x, uint8_t* codes, float* scales, int heads, int64_t head_elems) {
  extern __shared__ __align__(1024) uint4 ring[];  // kSlots * kChunk bytes
  __shared__ uint64_t full[kSlots], empty[kSlots];
  __shared__ float warp_amax[kEncoderWarps];
  init_ring(full, empty, kSlots, kEncoderWarps);
  __syncthreads();
  const int chunks = static_cast<int>(head_elems * 2 / kChunk);
  if (threadIdx.x < 32) {  // the copier
    if (threadIdx.x == 0) {
      copy_heads(x, heads, head_elems, kChunk, kMode == 1 ? 2 : 1, reinterpret_cast<char*>(ring), full, empty, kSlots);
    }
    return;
  }
  const int t = threadIdx.x - 32, warp = t / 32;
  int n = 0;
  for (int h = blockIdx.x; h < heads; h += gridDim.x) {
    __half2 inverse = __float2half2_rn(1.0f);
    if (kMode == 1) {
      float amax = 0.f;
      for (int c = 0; c < chunks; ++c, ++n) {
        const int s = n % kSlots;
        mbarrier_wait(&full[s], (n / kSlots) & 1);
        const uint4* slot = ring + s * (kChunk / 16);
        __half2 m = __float2half2_rn(0.f);
        for (int j = 0; j < 4; ++j) {
          const uint4 v = slot[t + j * kEncoders];
          m = max_abs_pairs(m, v);
        }
        amax = fmaxf(amax, fmaxf(__low2float(m), __high2float(m)));
        __syncwarp();
        if (t % 32 == 0) mbarrier_arrive(&empty[s]);
      }
      amax = group_max<32>(amax);
      if (t % 32 == 0) warp_amax[warp] = amax;
      barrier_sync(1, kEncoders);
      for (int w = 0; w < kEncoderWarps; ++w) amax = fmaxf(amax, warp_amax[w]);
      barrier_sync(1, kEncoders);
      const float scale = fmaxf(amax, 1e-12f) / 448.f;
      if (t == 0) scales[h] = scale;
      inverse = __float2half2_rn(1.f / scale);
    }
    for (int c = 0; c < chunks; ++c, ++n) {
      const int s = n % kSlots;
      mbarrier_wait(&full[s], (n / kSlots) & 1);
      const uint4* slot = ring + s * (kChunk / 16);
      uint4 v[4];
      for (int j = 0; j < 4; ++j) v[j] = slot[2 * t + (j & 1) + (j / 2) * 2 * kEncoders];
      __syncwarp();
      if (t % 32 == 0) mbarrier_arrive(&empty[s]);
      uint8_t* out = codes + h * head_elems + static_cast<int64_t>(c) * (kChunk / 2);
      for (int p = 0; p < 2; ++p) {
        const uint2 lo = e4m3_times(v[2 * p], inverse), hi = e4m3_times(v[2 * p + 1], inverse);
        *reinterpret_cast<uint4*>(out + (2 * t + p * 2 * kEncoders) * 8) = make_uint4(lo.x, lo.y, hi.x, hi.y);
      }
    }
  }
}

int main() {
  const int heads = 128;
  const int64_t elems = 2048 * 128;
  const ProbeBuffers b(heads, elems, heads);
  const int smem = kSlots * kChunk;
  cudaFuncSetAttribute(quantize_heads<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(quantize_heads<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("SMs %d; 128 heads of 512 KB fp16 -> e4m3 (64 MB read, 32 MB written)\n", sms);
  printf("%6s %5s %10s %8s %10s\n", "mode", "G", "us", "TB/s", "SM-us");
  for (int mode = 0; mode < 2; ++mode) {
    for (int g : {8, 16, 24, 32, 44, 66, 132}) {
      const float us = median_us(b.flush, [&] {
        if (mode == 0) {
          quantize_heads<0><<<g, 32 + kEncoders, smem>>>(b.x, b.codes, b.scales, heads, elems);
        } else {
          quantize_heads<1><<<g, 32 + kEncoders, smem>>>(b.x, b.codes, b.scales, heads, elems);
        }
      });
      printf("%6d %5d %10.1f %8.2f %10.0f\n", mode, g, us, 96.0 * (1 << 20) / us / 1e6, us * g);
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
