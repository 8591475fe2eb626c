// CPU implementation of sdpa::quantize_fp8 (per-head amax, scale = amax / 448, round-to-nearest-even encode),
// quantize_fp8_qkv and quantize_fp8_qkv_smooth_k.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "../checks.h"
#include "../kernels/common/fp8.h"

namespace sdpa {
namespace {

// With codes_width > D the codes of each row are followed by code 0 up to codes_width (quantize_fp8_qkv).
std::tuple<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x, const std::optional<at::Tensor>& scale,
                                                 int64_t codes_width) {
  check_quantize_inputs(x, scale);
  const at::Tensor values = x.to(at::kFloat).contiguous();  // exact for fp16 / bf16
  const int64_t cols = x.size(3), codes_cols = std::max(codes_width, cols);
  at::Tensor codes = at::zeros({x.size(0), x.size(1), x.size(2), codes_cols}, x.options().dtype(at::kByte));
  at::Tensor scales = scale.has_value() ? scale->to(at::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous()
                                        : at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kFloat));

  const int64_t heads = x.size(0) * x.size(1), per_head = x.size(2) * cols;
  const float* src = values.data_ptr<float>();
  uint8_t* dst = codes.data_ptr<uint8_t>();
  float* scale_ptr = scales.data_ptr<float>();
  const bool derive_scale = !scale.has_value();
  at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      const float* head = src + h * per_head;
      if (derive_scale) {
        float amax = 0.0f;
        for (int64_t i = 0; i < per_head; ++i) amax = std::fmax(amax, std::fabs(head[i]));
        scale_ptr[h] = scale_from_amax(amax);
      }
      for (int64_t row = 0; row < x.size(2); ++row) {
        uint8_t* row_codes = dst + (h * x.size(2) + row) * codes_cols;
        for (int64_t c = 0; c < cols; ++c) row_codes[c] = quantize_e4m3(head[row * cols + c], scale_ptr[h]);
      }
    }
  });
  return {codes.view(at::kFloat8_e4m3fn), scales};
}

std::tuple<at::Tensor, at::Tensor> quantize_fp8_cpu(const at::Tensor& x, const std::optional<at::Tensor>& scale) {
  return quantize_rows(x, scale, 0);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_fp8_qkv_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::optional<int64_t> codes_width) {
  check_quantize_qkv_inputs(q, k, v, codes_width);
  auto [q8, qs] = quantize_rows(q, std::nullopt, codes_width.value_or(0));
  auto [k8, ks] = quantize_rows(k, std::nullopt, codes_width.value_or(0));
  auto [v8, vs] = quantize_rows(v, std::nullopt, codes_width.value_or(0));
  return {q8, qs, k8, ks, v8, vs};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_fp8_kv_cpu(const at::Tensor& k,
                                                                               const at::Tensor& v,
                                                                               std::optional<int64_t> codes_width) {
  check_quantize_kv_inputs(k, v, codes_width);
  auto [k8, ks] = quantize_rows(k, std::nullopt, codes_width.value_or(0));
  auto [v8, vs] = quantize_rows(v, std::nullopt, codes_width.value_or(0));
  return {k8, ks, v8, vs};
}

// k's mean key per head in float32, and k minus it quantized as float32 values.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
quantize_fp8_qkv_smooth_k_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_quantize_qkv_inputs(q, k, v);
  const at::Tensor keys = k.to(at::kFloat);
  const at::Tensor shift = keys.mean(2);
  auto [q8, qs] = quantize_fp8_cpu(q, std::nullopt);
  auto [k8, ks] = quantize_fp8_cpu(keys - shift.unsqueeze(2), std::nullopt);
  auto [v8, vs] = quantize_fp8_cpu(v, std::nullopt);
  return {q8, qs, k8, ks, v8, vs, shift};
}

TORCH_LIBRARY_IMPL(sdpa, CPU, m) {
  m.impl("quantize_fp8", &quantize_fp8_cpu);
  m.impl("quantize_fp8_qkv", &quantize_fp8_qkv_cpu);
  m.impl("quantize_fp8_kv", &quantize_fp8_kv_cpu);
  m.impl("quantize_fp8_qkv_smooth_k", &quantize_fp8_qkv_smooth_k_cpu);
}

}  // namespace sdpa
