// Device helpers that turn fp32, fp16 or bf16 values into E4M3 codes under a per-head scale, shared by the quantizer,
// the KV-cache append and the decode kernel's own quantization of q.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../common/fp8.h"
#include "../common/params.h"

namespace sdpa {

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// The codes of pairs [first, last) of x / scale by IEEE division.
template <int kVec>
__device__ __forceinline__ void divide_pairs(const float (&x)[kVec], float scale, uint16_t (&pairs)[kVec / 2],
                                             int first, int last) {
#pragma unroll
  for (int e = first; e < last; ++e) {
    pairs[e] = encode_e4m3x2(__fdiv_rn(x[2 * e], scale), __fdiv_rn(x[2 * e + 1], scale));
  }
}

// x / scale for the E4M3 encode, giving the codes of IEEE division, mostly by multiplications. The product
// q = rn(x * rn(1 / scale)) lies within 1.5 ulp of the quotient d = rn(x / scale) (three roundings of at most 2^-24
// of the value each), so rn(q * (1 - 2^-20)) and rn(q * (1 + 2^-20)) lie on either side of d; E4M3 rounding is
// monotonic, so where those two give the same code d gives it too. They differ only within about 2^-20 of an E4M3
// rounding midpoint (about 8 in 10^6 random values), where those values take the division, as every value does
// under a scale whose reciprocal is not a normal float (inverse 0). Before, a division per value (a MUFU.RCP and
// its fix-up): the quantizer issued at 68% of its peak rate, most stalls on dependent arithmetic (ncu, H100).
struct E4m3Divisor {
  float scale, inverse;

  __device__ explicit E4m3Divisor(float s) : scale(s) {
    const float r = __frcp_rn(s);
    inverse = fabsf(r) >= 0x1p-126f && fabsf(r) <= 0x1p127f ? r : 0.0f;
  }

  // The codes of x / scale, pairwise (encode_e4m3x2), kVec even. The brackets are compared a 32-bit word of four
  // codes at a time where there are eight (16-bit inputs), with one branch per word: eight values took ~72
  // instructions with a branch per pair, ~50 this way (sm_90a). Four fp32 values stay pairwise: tested together,
  // they made the smoothing whole-head blocks spill at their 40 registers.
  template <int kVec>
  __device__ __forceinline__ void encode(const float (&x)[kVec], uint16_t (&pairs)[kVec / 2]) const {
    constexpr float kBelow = 1.0f - 0x1p-20f, kAbove = 1.0f + 0x1p-20f;
    constexpr int kGroup = kVec >= 8 ? 2 : 1;  // pairs per test
#pragma unroll
    for (int g = 0; g < kVec / 2; g += kGroup) {
      uint32_t below = 0, above = 0;
#pragma unroll
      for (int e = g; e < g + kGroup; ++e) {
        const float q0 = x[2 * e] * inverse, q1 = x[2 * e + 1] * inverse;
        pairs[e] = encode_e4m3x2(q0 * kBelow, q1 * kBelow);
        below |= static_cast<uint32_t>(pairs[e]) << 16 * (e - g);
        above |= static_cast<uint32_t>(encode_e4m3x2(q0 * kAbove, q1 * kAbove)) << 16 * (e - g);
      }
      if (below != above || inverse == 0.0f) divide_pairs(x, scale, pairs, g, g + kGroup);
    }
  }
};

// The same codes by one IEEE division per value: fewer registers, for kernels that E4m3Divisor would make spill.
struct E4m3Division {
  float scale;

  __device__ explicit E4m3Division(float s) : scale(s) {}
  template <int kVec>
  __device__ __forceinline__ void encode(const float (&x)[kVec], uint16_t (&pairs)[kVec / 2]) const {
    divide_pairs(x, scale, pairs, 0, kVec / 2);
  }
};

// Encodes kVec values to consecutive codes of x / divisor.scale: one hardware cvt per pair on sm_89+ for each
// bound of E4m3Divisor, and one 4- or 8-byte store.
template <int kVec, class Divisor>
__device__ __forceinline__ void store_codes(uint8_t* codes, const float (&x)[kVec], const Divisor& divisor) {
  if constexpr (kVec == 1) {
    *codes = quantize_e4m3(x[0], divisor.scale);
  } else {
    uint16_t pairs[kVec / 2];
    divisor.encode(x, pairs);
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint2*>(codes) = *reinterpret_cast<const uint2*>(pairs);
    } else {
      *reinterpret_cast<uint32_t*>(codes) = *reinterpret_cast<const uint32_t*>(pairs);
    }
  }
}
template <int kVec>
__device__ __forceinline__ void store_codes(uint8_t* codes, const float (&x)[kVec], float scale) {
  store_codes<kVec>(codes, x, E4m3Divisor(scale));
}

// kVec consecutive values of T as floats: one 16-byte load when kVec > 1 (vectorized rows).
template <typename T, int kVec>
__device__ __forceinline__ void load_values(const T* src, float (&x)[kVec]) {
  if constexpr (kVec == 1) {
    x[0] = to_float(*src);
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const T* elems = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = to_float(elems[e]);
  }
}

// Calls fn with a value of the C++ type of an input type (float, __half or __nv_bfloat16).
template <typename Fn>
cudaError_t with_input_type(InputType type, Fn fn) {
  switch (type) {
    case InputType::kFloat32:
      return fn(float{});
    case InputType::kFloat16:
      return fn(__half{});
    case InputType::kBFloat16:
      return fn(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace sdpa
