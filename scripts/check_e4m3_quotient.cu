// Checks that E4m3Divisor (csrc/kernels/quantize/encode.cuh) encodes as IEEE division does, wherever it does not
// divide itself: every pair of an fp16 or bf16 value x and an fp16 or bf16 amax >= |x| (scale = amax / 448, as the
// quantizer derives it), then 2^34 random fp32 pairs of any exponents and 2^34 with x / scale in E4M3's range.
// Counts the pairs whose codes differ and those whose quotients differ where |x / scale| >= 2^-12 (both must be 0;
// exit 1 otherwise), and, for information, quotients that differ below that, whose codes are 0 either way.
//   nvcc -O3 -std=c++17 -arch=sm_90a -I csrc/kernels scripts/check_e4m3_quotient.cu -o /tmp/check && /tmp/check
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>

#include "common/fp8.h"
#include "quantize/encode.cuh"

namespace {

__device__ float from_bits16(uint32_t bits, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)))
              : __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// Totals: pairs checked, codes that differ, quotients that differ at |x / scale| >= 2^-12, and below it.
constexpr int kTotals = 4;

// Compares one pair (when `checked`) and adds the warp's counts to the totals.
__device__ void compare(bool checked, float x, const sdpa::E4m3Divisor& divisor, unsigned long long* totals) {
  const float ours = divisor.quotient(x), ieee = __fdiv_rn(x, divisor.scale);
  const bool quotient_differs = checked && __float_as_uint(ours) != __float_as_uint(ieee);
  const bool large = fabsf(ieee) >= 0x1p-12f;
  const bool counts[kTotals] = {checked, checked && sdpa::encode_e4m3x2(ours, 0.0f) != sdpa::encode_e4m3x2(ieee, 0.0f),
                                quotient_differs && large, quotient_differs && !large};
#pragma unroll
  for (int i = 0; i < kTotals; ++i) {
    const unsigned lanes = __popc(__ballot_sync(0xFFFFFFFFu, counts[i]));
    if (threadIdx.x % 32 == 0 && lanes != 0) atomicAdd(totals + i, lanes);
  }
}

// Block b: amax of bit pattern b; its threads take every x.
__global__ void check_16_bit(bool bf16, unsigned long long* totals) {
  const float amax = from_bits16(blockIdx.x, bf16);
  if (!(amax > 0.0f) || isinf(amax)) return;
  const sdpa::E4m3Divisor divisor(sdpa::scale_from_amax(amax), /*bounds_values=*/true);
  if (divisor.inverse == 0.0f) return;  // divides itself
  for (uint32_t bits = threadIdx.x; bits < 65536; bits += blockDim.x) {
    const float x = from_bits16(bits, bf16);
    compare(fabsf(x) <= amax, x, divisor, totals);
  }
}

__device__ uint32_t mix(uint64_t i) {  // splitmix64, high word
  i += 0x9E3779B97F4A7C15ull;
  i = (i ^ (i >> 30)) * 0xBF58476D1CE4E5B9ull;
  i = (i ^ (i >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((i ^ (i >> 31)) >> 32);
}

// Pairs 2i and 2i + 1 of a random stream: any finite amax and x (x / scale mostly far from E4M3's range), or with
// `in_range` x = amax * u, u in [2^-12, 1], so that x / scale spans E4M3's codes and their rounding midpoints.
__global__ void check_fp32(bool in_range, uint64_t first, int per_thread, unsigned long long* totals) {
  const uint64_t thread = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  for (int k = 0; k < per_thread; ++k) {
    const uint64_t i = first + thread * per_thread + k;
    float amax = fabsf(__uint_as_float(mix(2 * i)));
    float x = __uint_as_float(mix(2 * i + 1));
    if (in_range) x = copysignf(amax * fmaxf(0x1p-12f, __uint_as_float(0x3F800000u | mix(2 * i + 1) >> 9) - 1.0f), x);
    if (!in_range && fabsf(x) > amax) {
      const float larger = fabsf(x);
      x = copysignf(amax, x);
      amax = larger;
    }
    const sdpa::E4m3Divisor divisor(sdpa::scale_from_amax(amax), /*bounds_values=*/true);
    compare(isfinite(amax) && amax > 0.0f && divisor.inverse != 0.0f, x, divisor, totals);
  }
}

}  // namespace

int main() {
  unsigned long long* totals = nullptr;
  cudaMallocManaged(&totals, kTotals * sizeof(unsigned long long));
  bool failed = false;
  auto run = [&](const char* what, auto launch) {
    for (int i = 0; i < kTotals; ++i) totals[i] = 0;
    launch();
    cudaDeviceSynchronize();
    std::printf("%-42s %12llu pairs: codes differ %llu, quotients differ %llu (and %llu below 2^-12)\n", what,
                totals[0], totals[1], totals[2], totals[3]);
    failed = failed || totals[1] != 0 || totals[2] != 0;
  };
  run("fp16 x, fp16 amax (every pair)", [&] { check_16_bit<<<65536, 256>>>(false, totals); });
  run("bf16 x, bf16 amax (every pair)", [&] { check_16_bit<<<65536, 256>>>(true, totals); });
  constexpr int kBlocks = 4096, kThreads = 256, kPerThread = 1 << 14;  // 2^34 pairs a launch
  run("fp32, any exponents (2^34 random)", [&] { check_fp32<<<kBlocks, kThreads>>>(false, 0, kPerThread, totals); });
  run("fp32, x / scale within E4M3 (2^34 random)",
      [&] { check_fp32<<<kBlocks, kThreads>>>(true, 1ull << 40, kPerThread, totals); });
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(err));
  return failed || err != cudaSuccess ? 1 : 0;
}
