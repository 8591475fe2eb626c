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

// x / scale for the E4M3 encode, giving the codes of IEEE division, mostly by multiplications. The product
// q = rn(x * rn(1 / scale)) lies within 1.5 ulp of the quotient d = rn(x / scale) (three roundings of at most 2^-24
// of the value each), so rn(q * (1 - 2^-20)) and rn(q * (1 + 2^-20)) lie on either side of d; E4M3 rounding is
// monotonic, so where those two give the same code d gives it too. They differ only within about 2^-20 of an E4M3
// rounding midpoint (about 8 in 10^6 random values), where the pair of values takes the division, as every value
// does under a scale whose reciprocal is not a normal float (inverse 0). Before, a division per value (a MUFU.RCP
// and its fix-up): the quantizer issued at 68% of its peak rate, most stalls on dependent arithmetic (ncu, H100).
struct E4m3Divisor {
  float scale, inverse;

  __device__ explicit E4m3Divisor(float s) : scale(s) {
    const float r = __frcp_rn(s);
    inverse = fabsf(r) >= 0x1p-126f && fabsf(r) <= 0x1p127f ? r : 0.0f;
  }

  // The codes of x0 / scale and x1 / scale (encode_e4m3x2).
  __device__ __forceinline__ uint16_t encode_pair(float x0, float x1) const {
    constexpr float kBelow = 1.0f - 0x1p-20f, kAbove = 1.0f + 0x1p-20f;
    const float q0 = x0 * inverse, q1 = x1 * inverse;
    const uint16_t low = encode_e4m3x2(q0 * kBelow, q1 * kBelow), high = encode_e4m3x2(q0 * kAbove, q1 * kAbove);
    return low == high && inverse != 0.0f ? low : encode_e4m3x2(__fdiv_rn(x0, scale), __fdiv_rn(x1, scale));
  }
};

// The same codes by one IEEE division per value: fewer registers, for kernels that E4m3Divisor would make spill.
struct E4m3Division {
  float scale;

  __device__ explicit E4m3Division(float s) : scale(s) {}
  __device__ __forceinline__ uint16_t encode_pair(float x0, float x1) const {
    return encode_e4m3x2(__fdiv_rn(x0, scale), __fdiv_rn(x1, scale));
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
#pragma unroll
    for (int e = 0; e < kVec / 2; ++e) pairs[e] = divisor.encode_pair(x[2 * e], x[2 * e + 1]);
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
