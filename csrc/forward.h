// The functional fp8_forward, written once on top of a backend's fp8_forward_into.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "checks.h"

namespace sdpa {

using ForwardInto = void (*)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& q_scale,
                             const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& out,
                             const at::Tensor& lse, bool is_causal, std::optional<double> scale,
                             c10::string_view variant);

template <ForwardInto kInto>
std::tuple<at::Tensor, at::Tensor> forward_functional(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      const at::Tensor& q_scale, const at::Tensor& k_scale,
                                                      const at::Tensor& v_scale, bool is_causal,
                                                      std::optional<double> scale,
                                                      std::optional<at::ScalarType> out_dtype,
                                                      c10::string_view variant) {
  const AttentionDims d = check_attention_inputs(q, k, v, q_scale, k_scale, v_scale);
  at::Tensor out = at::empty({d.batch, d.heads_q, d.seqlen_q, d.head_dim}, q.options().dtype(resolve_out_dtype(out_dtype)));
  at::Tensor lse = at::empty({d.batch, d.heads_q, d.seqlen_q}, q.options().dtype(at::kFloat));
  kInto(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal, scale, variant);
  return {out, lse};
}

}  // namespace sdpa
