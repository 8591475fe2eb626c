// Device helpers that turn fp32, fp16 or bf16 values into E4M3 codes under a per-head scale, shared by the quantizer,
// the KV-cache append and the decode kernel's own quantization of q.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// The largest |value| of a 16-byte vector of T, NaNs ignored as fmaxf ignores them. 16-bit values pairwise by
// half2 / bfloat162 max, which selects a value without rounding it: the same result as in fp32, in half the
// instructions (the quantizer issued at 68% of its peak rate, ncu, H100).
template <typename T>
__device__ __forceinline__ float vector_amax(const uint4& v) {
  if constexpr (std::is_same_v<T, float>) {
    return fmaxf(fmaxf(fabsf(__uint_as_float(v.x)), fabsf(__uint_as_float(v.y))),
                 fmaxf(fabsf(__uint_as_float(v.z)), fabsf(__uint_as_float(v.w))));
  } else {
    using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const Pair* pairs = reinterpret_cast<const Pair*>(&v);
    const Pair m =
        __hmax2(__hmax2(__habs2(pairs[0]), __habs2(pairs[1])), __hmax2(__habs2(pairs[2]), __habs2(pairs[3])));
    return fmaxf(__low2float(m), __high2float(m));
  }
}

// The codes of quotient(x[i]), four to a word (encode_e4m3x4), kVec a multiple of 4: the divisors' one loop.
template <int kVec, class Quotient>
__device__ __forceinline__ void encode_words(const float (&x)[kVec], uint32_t (&words)[kVec / 4], Quotient quotient) {
#pragma unroll
  for (int w = 0; w < kVec / 4; ++w) {
    words[w] = encode_e4m3x4(quotient(x[4 * w]), quotient(x[4 * w + 1]), quotient(x[4 * w + 2]),
                             quotient(x[4 * w + 3]));
  }
}

// x / scale for the E4M3 encode: the codes of IEEE division, (x / scale).to(torch.float8_e4m3fn), by a multiply and
// two FMAs. With inverse = rn(1 / scale) and q = rn(x * inverse), the residual x - q * scale is exact by FMA and
// rn(q + residual * inverse) is rn(x / scale) (Markstein's theorem; div.rn.f32 runs the same steps after a range
// check), while nothing overflows or underflows: scale in [2^-90, 2^126) (a normal reciprocal; every value whose
// code is not 0 then has an exact residual) and |x / scale| far below FLT_MAX, which a scale from the encoded
// values' own amax guarantees (`bounds_values`). Otherwise (a scale the caller gives, under which values may
// saturate; an extreme scale) every value divides. scripts/check_e4m3_quotient.cu compares the codes and the
// quotients with __fdiv_rn's on every pair of an fp16 or bf16 value and an fp16 or bf16 amax at least as large, and
// on 2^35 random fp32 pairs: the codes all equal, the quotients wherever |x / scale| >= 2^-12 (below, an inexact
// residual may move the last bit of a quotient whose code is 0). Before, the codes of q (1 -+ 2^-20) were compared
// four at a time and divided where they differed, near a rounding midpoint: 6 in 10^4 fp16 and 6 in 10^3 bf16
// values (whose 8-bit mantissas often land on one), so 14% (fp16) and 26% (bf16) of a warp's steps over 32 vectors
// took a branch of divisions. quantize_fp8_qkv, graph us, H100, same run, before / after: bf16 4x16x2048x128
// 78.5 / 67.3, fp16 67.1 / 62.3.
struct E4m3Divisor {
  float scale, inverse;  // inverse 0: every value divides

  __device__ E4m3Divisor(float s, bool bounds_values) : scale(s) {
    inverse = bounds_values && s >= 0x1p-90f && s < 0x1p126f ? __frcp_rn(s) : 0.0f;
  }

  // The residual is taken as q * scale - x and subtracted: as x - q * scale it is +0 for x = -0, and the quotient
  // +0 where IEEE division gives -0 (code 0x00 for 0x80).
  __device__ __forceinline__ float quotient(float x) const {
    const float q = __fmul_rn(x, inverse);
    return __fmaf_rn(-__fmaf_rn(q, scale, -x), inverse, q);
  }

  // The codes of x / scale, four to a word.
  template <int kVec>
  __device__ __forceinline__ void encode(const float (&x)[kVec], uint32_t (&words)[kVec / 4]) const {
    if (inverse == 0.0f) {
      encode_words(x, words, [&](float v) { return __fdiv_rn(v, scale); });  // IEEE division
    } else {
      encode_words(x, words, [&](float v) { return quotient(v); });
    }
  }
};

// The codes of x / scale for a power-of-two scale from power_of_two_scale: x times its reciprocal, which is exact, so
// the product rounds as the quotient does.
struct E4m3PowerOfTwoDivisor {
  float inverse;

  __device__ explicit E4m3PowerOfTwoDivisor(float scale) { inverse = __frcp_rn(scale); }

  template <int kVec>
  __device__ __forceinline__ void encode(const float (&x)[kVec], uint32_t (&words)[kVec / 4]) const {
    encode_words(x, words, [&](float v) { return v * inverse; });
  }
};

// Encodes kVec values to consecutive codes of x / divisor.scale: one hardware cvt per pair on sm_89+, and one 4- or
// 8-byte store.
template <int kVec, class Divisor>
__device__ __forceinline__ void store_codes(uint8_t* codes, const float (&x)[kVec], const Divisor& divisor) {
  if constexpr (kVec == 1) {
    *codes = quantize_e4m3(x[0], divisor.scale);
  } else {
    uint32_t words[kVec / 4];
    divisor.encode(x, words);
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint2*>(codes) = make_uint2(words[0], words[1]);
    } else {
      *reinterpret_cast<uint32_t*>(codes) = words[0];
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
