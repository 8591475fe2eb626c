// A quantizer of k and v with a scale per 64-key tile on G whole-SM blocks, no exchange between blocks: each of 8
// encoder warps takes a tile of its own (16 KB at D = 128), its amax from shared memory, then its encode from there
// with the tile's scale; a copier thread lands the tiles by TMA bulk copies in a 12-slot ring (the pattern of
// probe_sm_bandwidth.cu), block b heads b, b + G, ... Mode 0: the tile's amax / 448 rounded up to a power of two
// (one multiply and a pair conversion a value); mode 1: amax / 448 by IEEE division a value. 128 heads of 2048 x 128
// fp16 (k and v of 4x16x2048x128: 64 MB read, 32 MB written); median of 7 runs, L2 flushed before each, event time.
// H200, 2026-11-29 (us):
//   mode 0: G 16 70.5, 24 54.5, 32 39.5 (1264 SM-us), 40 41.1, 48 36.5
//   mode 1: G 16 328.4, 24 248.3, 32 167.7, 40 167.7, 48 128.1
// Per-tile scales need no exchange between the blocks (a per-head scale does: h200-2026-11-29-quantizer-beside-
// kernel.md), and on 32 SMs the encode's instructions decide the time: powers of two it must be, or a cheaper
// quotient than a division.
//   nvcc -std=c++17 -O3 -arch=sm_90a -I csrc/kernels -o /tmp/probe scripts/probe_tile_quantizer.cu && /tmp/probe
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>

#include "probe_tma.cuh"

constexpr int kSlots = 12, kTile = 16384, kWarps = 8;

template <int kMode>
__global__ void __launch_bounds__(32 + 32 * kWarps, 1)
    quantize_tiles(const half* x, uint8_t* codes, float* scales, int heads, int64_t head_elems) {
  extern __shared__ __align__(1024) uint4 ring[];  // kSlots * kTile bytes
  __shared__ uint64_t full[kSlots], empty[kSlots];
  init_ring(full, empty, kSlots, 1);
  __syncthreads();
  const int tiles = static_cast<int>(head_elems * 2 / kTile);
  if (threadIdx.x < 32) {  // the copier
    if (threadIdx.x == 0) {
      copy_heads(x, heads, head_elems, kTile, 1, reinterpret_cast<char*>(ring), full, empty, kSlots);
    }
    return;
  }
  const int warp = threadIdx.x / 32 - 1, lane = threadIdx.x % 32;
  int n = 0;
  for (int h = blockIdx.x; h < heads; h += gridDim.x) {
    for (int c = 0; c < tiles; ++c, ++n) {
      if (n % kWarps != warp) continue;
      const int s = n % kSlots;
      mbarrier_wait(&full[s], (n / kSlots) & 1);
      const uint4* slot = ring + s * (kTile / 16);
      __half2 m = __float2half2_rn(0.f);
      for (int k = lane; k < kTile / 16; k += 32) {
        const uint4 v = slot[k];
        m = max_abs_pairs(m, v);
      }
      const float amax = group_max<32>(fmaxf(__low2float(m), __high2float(m)));
      const float scale = fmaxf(amax, 1e-30f) / 448.f;
      uint8_t* out = codes + h * head_elems + static_cast<int64_t>(c) * (kTile / 2);
      if (lane == 0) scales[h * tiles + c] = scale;
      if (kMode == 0) {
        int exponent;
        frexpf(scale, &exponent);
        const __half2 inverse = __float2half2_rn(ldexpf(1.f, -exponent));
        for (int k = lane; k < kTile / 16; k += 32) {
          *reinterpret_cast<uint2*>(out + k * 8) = e4m3_times(slot[k], inverse);
        }
      } else {
        for (int k = lane; k < kTile / 16; k += 32) {
          const uint4 v = slot[k];
          const __half* values = reinterpret_cast<const __half*>(&v);
          uint32_t words[2];
          for (int w = 0; w < 2; ++w) {
            uint32_t word = 0;
            for (int q = 0; q < 4; ++q) {
              const __nv_fp8_e4m3 code(__fdiv_rn(__half2float(values[4 * w + q]), scale));
              word |= uint32_t(*reinterpret_cast<const uint8_t*>(&code)) << (8 * q);
            }
            words[w] = word;
          }
          *reinterpret_cast<uint2*>(out + k * 8) = make_uint2(words[0], words[1]);
        }
      }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&empty[s]);
    }
  }
}

int main() {
  const int heads = 128;
  const int64_t elems = 2048 * 128;
  const ProbeBuffers b(heads, elems, heads * 32);
  const int smem = kSlots * kTile;
  cudaFuncSetAttribute(quantize_tiles<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(quantize_tiles<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  printf("tile scales: 128 heads of 2048x128 fp16, 64-key tiles, a warp a tile; mode 0 power-of-two, 1 amax/448\n");
  for (int mode = 0; mode < 2; ++mode) {
    for (int g : {16, 24, 32, 40, 48}) {
      const float us = median_us(b.flush, [&] {
        if (mode == 0) {
          quantize_tiles<0><<<g, 32 + 32 * kWarps, smem>>>(b.x, b.codes, b.scales, heads, elems);
        } else {
          quantize_tiles<1><<<g, 32 + 32 * kWarps, smem>>>(b.x, b.codes, b.scales, heads, elems);
        }
      });
      printf("mode %d G %3d: %6.1f us  %.2f TB/s  %5.0f SM-us  %s\n", mode, g, us, 96.0 * (1 << 20) / us / 1e6,
             us * g, cudaGetErrorString(cudaGetLastError()));
    }
  }
}
