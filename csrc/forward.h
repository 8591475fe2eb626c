// What the CPU and CUDA fp8_forward share: the functional op written once on top of a backend's fp8_forward_into,
// and the quantization of a q given as values.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <tuple>

#include "checks.h"

namespace sdpa {

using ForwardInto = void (*)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& q_scale, const at::Tensor& k_scale,
                             const at::Tensor& v_scale, const at::Tensor& out, const at::Tensor& lse, bool is_causal,
                             std::optional<double> scale, c10::string_view variant,
                             const std::optional<at::Tensor>& seqlens_k, c10::string_view causal_alignment,
                             c10::string_view q_quantization);

template <ForwardInto kInto>
std::tuple<at::Tensor, at::Tensor> forward_functional(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      const std::optional<at::Tensor>& q_scale,
                                                      const at::Tensor& k_scale, const at::Tensor& v_scale,
                                                      bool is_causal, std::optional<double> scale,
                                                      std::optional<at::ScalarType> out_dtype,
                                                      c10::string_view variant,
                                                      const std::optional<at::Tensor>& seqlens_k,
                                                      c10::string_view causal_alignment,
                                                      c10::string_view q_quantization) {
  const AttentionDims d = check_attention_inputs(q, k, v, q_scale, k_scale, v_scale, seqlens_k);
  at::Tensor out = at::empty({d.batch, d.heads_q, d.seqlen_q, d.head_dim}, q.options().dtype(resolve_out_dtype(out_dtype)));
  at::Tensor lse = at::empty({d.batch, d.heads_q, d.seqlen_q}, q.options().dtype(at::kFloat));
  kInto(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal, scale, variant, seqlens_k, causal_alignment,
        q_quantization);
  return {out, lse};
}

// A q given as values, as E4M3 codes and scales: sdpa::quantize_fp8 on q's device (scale: given or amax / 448).
inline std::tuple<at::Tensor, at::Tensor> quantize_query(const at::Tensor& q, const std::optional<at::Tensor>& scale) {
  static const auto quantize =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("sdpa::quantize_fp8", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const std::optional<at::Tensor>&)>();
  return quantize.call(q, scale);
}

}  // namespace sdpa
