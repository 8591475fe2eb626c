// E4M3 codec shared by the CPU implementation and the CUDA kernels.
//
// E4M3 here means exactly torch.float8_e4m3fn: 1 sign, 4 exponent (bias 7) and 3 mantissa bits, no
// infinities, NaN = S.1111.111, largest finite value 448. Encoding rounds to nearest even and saturates to
// +-448 (infinities too), which is what torch's own cast does (checked against torch 2.13: 464, 480, 1e6 and
// inf all become 0x7E). Every E4M3 value is exact in fp16 and fp32, so decoding is exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "params.h"

namespace sdpa {

constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3MaxCode = 0x7E;
constexpr uint8_t kE4M3NanCode = 0x7F;

SDPA_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

SDPA_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// Exact decode of one E4M3 code.
SDPA_HOST_DEVICE float e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t magnitude = code & 0x7Fu;
  if (magnitude == 0x7Fu) return bits_float(sign | 0x7FC00000u);
  if (magnitude < 8u) {
    // Subnormal: mantissa * 2^-9.
    return bits_float(sign | float_bits(static_cast<float>(magnitude) * 0.001953125f));
  }
  // Normal: rebias the exponent from 7 to 127 and move the 3 mantissa bits to the top of fp32's 23.
  const uint32_t exponent = (magnitude >> 3) + 120u;
  return bits_float(sign | (exponent << 23) | ((magnitude & 7u) << 20));
}

// Round-to-nearest-even, saturating encode of one float.
SDPA_HOST_DEVICE uint8_t float_to_e4m3(float value) {
  const uint32_t bits = float_bits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | kE4M3NanCode;
  if (magnitude >= 0x43E00000u) return sign | kE4M3MaxCode;  // >= 448, infinity included
  if (magnitude < 0x3C800000u) {
    // Below the smallest normal (2^-6): a multiple of 2^-9; scaling by 512 is exact, rintf rounds half-even.
    const float units = bits_float(magnitude) * 512.0f;
#if defined(__CUDA_ARCH__)
    return sign | static_cast<uint8_t>(__float2int_rn(units));
#else
    return sign | static_cast<uint8_t>(__builtin_rintf(units));
#endif
  }
  // Normal: round the 23-bit mantissa to 3 bits, half to even; a carry moves into the exponent correctly.
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const uint32_t exponent = (rounded >> 23) - 120u;
  return sign | static_cast<uint8_t>((exponent << 3) | ((rounded >> 20) & 7u));
}

// The value stored for x under a per-head scale: x / scale with IEEE division, then encoded.
// Bit-identical to (x / scale).to(torch.float8_e4m3fn) with x already in fp32.
SDPA_HOST_DEVICE uint8_t quantize_e4m3(float x, float scale) {
#if defined(__CUDA_ARCH__)
  return float_to_e4m3(__fdiv_rn(x, scale));
#else
  return float_to_e4m3(x / scale);
#endif
}

#if defined(__CUDACC__)
// Two quotients (x / scale, already divided) at once; on sm_89 and later the encode is one
// cvt.rn.satfinite.e4m3x2.f32 (round to nearest even, +-448 for out-of-range values and infinities, NaN kept), the
// same function as float_to_e4m3.
__device__ __forceinline__ uint16_t encode_e4m3x2(float q0, float q1) {
#if __CUDA_ARCH__ >= 890
  uint16_t codes;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(codes) : "f"(q0), "f"(q1));
  return codes;
#else
  return static_cast<uint16_t>(float_to_e4m3(q0) | (float_to_e4m3(q1) << 8));
#endif
}
// Four quotients as the codes of one word, q0 in the low byte. On sm_89 and later the two pairs' halves join in PTX
// (mov.b32 {lo, hi}), which ptxas folds into the second cvt: two instructions a word, where joining two
// encode_e4m3x2 results took a byte permute (and zero extensions) more (nvcc 13.0, sm_90a).
__device__ __forceinline__ uint32_t encode_e4m3x4(float q0, float q1, float q2, float q3) {
#if __CUDA_ARCH__ >= 890
  uint32_t word;
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(word)
      : "f"(q0), "f"(q1), "f"(q2), "f"(q3));
  return word;
#else
  return encode_e4m3x2(q0, q1) | (static_cast<uint32_t>(encode_e4m3x2(q2, q3)) << 16);
#endif
}
#endif

// scale[b, h] = amax / 448, or 1 for a head of zeros (so that decoding is still x = code * scale).
SDPA_HOST_DEVICE float scale_from_amax(float amax) {
#if defined(__CUDA_ARCH__)
  return amax > 0.0f ? __fdiv_rn(amax, kE4M3Max) : 1.0f;
#else
  return amax > 0.0f ? amax / kE4M3Max : 1.0f;
#endif
}

// The scale of a 16-row group of q that an attention kernel quantizes itself (q_quantization='per_16_rows'): amax /
// 448 rounded up to a power of two, at least 2^-126, or 1 for a group of zeros (an infinite amax is kept). Its
// reciprocal is exact, so x / scale is one multiplication (E4m3PowerOfTwoDivisor). Under amax / 448 the codes of
// IEEE division (a multiply and two FMAs a value, and a branch) took ~450 of the ~670 instructions a consumer warp
// of `wgmma+predecode` ran before its first Q K^T (ncu, H200, 4x16x2048x128), and the Hopper kernels on q's values
// 1.4-3.2% more time (H200, graph us). E4M3 keeps 3 mantissa bits in every binade, so only the subnormal threshold
// moves, by at most one binade.
SDPA_HOST_DEVICE float power_of_two_scale(float amax) {
  if (!(amax > 0.0f) || std::isinf(amax)) return amax > 0.0f ? amax : 1.0f;
  int exponent;
  const float mantissa = std::frexp(amax, &exponent);  // amax = mantissa 2^exponent, mantissa in [0.5, 1)
  // amax <= 448 2^k = 0.875 2^(9 + k)
  const int k = exponent - 9 + (mantissa > 0.875f ? 1 : 0);
  return std::ldexp(1.0f, k > -126 ? k : -126);
}

}  // namespace sdpa
