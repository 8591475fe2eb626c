// CPU implementation of sdpa::kv_cache_append: each new row encoded with its head's fixed scale into the cache row
// start[b] + t; rows outside the cache are dropped, as on the GPU.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

#include "../checks.h"
#include "../kernels/common/fp8.h"

namespace sdpa {
namespace {

// Encodes rows of `values` (float32, contiguous [B, H, T, D]) minus `shift` ([B, H, D] or undefined) into `cache`.
void append_rows(const at::Tensor& values, const at::Tensor& cache, const at::Tensor& scale, const at::Tensor& shift,
                 const at::Tensor& start) {
  const int64_t B = values.size(0), H = values.size(1), T = values.size(2), D = values.size(3);
  const int64_t capacity = cache.size(2);
  const float* x = values.data_ptr<float>();
  const float* scales = scale.data_ptr<float>();
  const float* shifts = shift.defined() ? shift.data_ptr<float>() : nullptr;
  const int* first = start.data_ptr<int>();
  uint8_t* codes = static_cast<uint8_t*>(cache.data_ptr());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t position = first[b] + t;
        if (position < 0 || position >= capacity) continue;
        const float* row = x + ((b * H + h) * T + t) * D;
        uint8_t* dst = codes + b * cache.stride(0) + h * cache.stride(1) + position * cache.stride(2);
        for (int64_t d = 0; d < D; ++d) {
          const float value = shifts != nullptr ? row[d] - shifts[(b * H + h) * D + d] : row[d];
          dst[d] = quantize_e4m3(value, scales[b * H + h]);
        }
      }
    }
  }
}

void kv_cache_append_cpu(const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_cache, const at::Tensor& v_cache,
                         const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& start,
                         const std::optional<at::Tensor>& k_shift) {
  check_kv_cache_append_inputs(k, v, k_cache, v_cache, k_scale, v_scale, start, k_shift);
  const at::Tensor first = start.contiguous();
  const at::Tensor shift = k_shift.has_value() ? k_shift->contiguous() : at::Tensor();
  append_rows(k.to(at::kFloat).contiguous(), k_cache, k_scale.contiguous(), shift, first);
  append_rows(v.to(at::kFloat).contiguous(), v_cache, v_scale.contiguous(), at::Tensor(), first);
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CPU, m) { m.impl("kv_cache_append", &kv_cache_append_cpu); }

}  // namespace sdpa
