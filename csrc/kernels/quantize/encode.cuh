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

// Encodes kVec values to consecutive codes: one hardware cvt per pair on sm_89+ (quantize_e4m3x2), and one 4- or
// 8-byte store.
template <int kVec>
__device__ __forceinline__ void store_codes(uint8_t* codes, const float (&x)[kVec], float scale) {
  if constexpr (kVec == 1) {
    *codes = quantize_e4m3(x[0], scale);
  } else {
    uint16_t pairs[kVec / 2];
#pragma unroll
    for (int e = 0; e < kVec / 2; ++e) pairs[e] = quantize_e4m3x2(x[2 * e], x[2 * e + 1], scale);
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
