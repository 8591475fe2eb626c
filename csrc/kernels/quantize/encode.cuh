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

// x / scale for the E4M3 encode, giving the codes of IEEE division, mostly by one multiplication. The product
// rn(x * rn(1 / scale)) lies within 3 ulp of the quotient rn(x / scale) (relative errors of at most 2^-24 from each
// of its two roundings and from the quotient's one, against ulps of 2^-23 to 2^-24 of the value), so both round to
// the same E4M3 value unless an E4M3 rounding midpoint lies within 4 ulp of the product. E4M3 keeps 3 of fp32's 23
// mantissa bits, so above its normals (2^-6) the midpoints are the values whose low 20 mantissa bits are 0x80000;
// products near one (8 in 2^20 of random mantissas), below 2^-6, or under a scale whose reciprocal is not a normal
// float take the division. A division per value took a MUFU.RCP and the fix-up around it.
struct E4m3Divisor {
  float scale, inverse;  // inverse 0: every value takes the division

  // Implicit: callers pass a per-head scale.
  __device__ E4m3Divisor(float s) : scale(s) {  // NOLINT(google-explicit-constructor)
    const float r = __frcp_rn(s);
    inverse = fabsf(r) >= 0x1p-126f && fabsf(r) <= 0x1p127f ? r : 0.0f;
  }

  __device__ __forceinline__ float quotient(float x) const {
    const float q = x * inverse;
    const uint32_t magnitude = __float_as_uint(q) & 0x7FFFFFFFu;
    const uint32_t from_midpoint = (magnitude & 0xFFFFFu) - (0x80000u - 4u);
    const bool exact = from_midpoint > 8u && magnitude >= 0x3C800000u && inverse != 0.0f;
    return exact ? q : __fdiv_rn(x, scale);
  }
};

// Encodes kVec values to consecutive codes: one hardware cvt per pair on sm_89+ (encode_e4m3x2), and one 4- or
// 8-byte store.
template <int kVec>
__device__ __forceinline__ void store_codes(uint8_t* codes, const float (&x)[kVec], const E4m3Divisor& divisor) {
  if constexpr (kVec == 1) {
    *codes = float_to_e4m3(divisor.quotient(x[0]));
  } else {
    uint16_t pairs[kVec / 2];
#pragma unroll
    for (int e = 0; e < kVec / 2; ++e) {
      pairs[e] = encode_e4m3x2(divisor.quotient(x[2 * e]), divisor.quotient(x[2 * e + 1]));
    }
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint2*>(codes) = *reinterpret_cast<const uint2*>(pairs);
    } else {
      *reinterpret_cast<uint32_t*>(codes) = *reinterpret_cast<const uint32_t*>(pairs);
    }
  }
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
