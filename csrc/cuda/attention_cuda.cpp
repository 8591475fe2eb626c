// CUDA host side of sdpa::fp8_forward: checks, params, variant choice, launch on the current stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <sstream>
#include <string>
#include <vector>

#include "../checks.h"
#include "../forward.h"
#include "../kernels/dispatch/launch.h"

namespace sdpa {
namespace {

AttentionParams make_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& q_scale,
                            const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& out,
                            const at::Tensor& lse, const AttentionDims& d, bool is_causal, float softmax_scale) {
  AttentionParams p{};
  p.q = static_cast<const uint8_t*>(q.data_ptr());
  p.k = static_cast<const uint8_t*>(k.data_ptr());
  p.v = static_cast<const uint8_t*>(v.data_ptr());
  p.q_scale = q_scale.data_ptr<float>();
  p.k_scale = k_scale.data_ptr<float>();
  p.v_scale = v_scale.data_ptr<float>();
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.q_batch_stride = q.stride(0), p.q_head_stride = q.stride(1), p.q_row_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_head_stride = k.stride(1), p.k_row_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_head_stride = v.stride(1), p.v_row_stride = v.stride(2);
  p.out_batch_stride = out.stride(0), p.out_head_stride = out.stride(1), p.out_row_stride = out.stride(2);
  p.lse_batch_stride = lse.stride(0), p.lse_head_stride = lse.stride(1), p.lse_row_stride = lse.stride(2);
  p.batch = static_cast<int>(d.batch);
  p.heads_q = static_cast<int>(d.heads_q);
  p.heads_kv = static_cast<int>(d.heads_kv);
  p.seqlen_q = static_cast<int>(d.seqlen_q);
  p.seqlen_k = static_cast<int>(d.seqlen_k);
  p.head_dim = static_cast<int>(d.head_dim);
  p.softmax_scale = softmax_scale;
  p.is_causal = is_causal;
  p.out_type = out.scalar_type() == at::kBFloat16 ? OutputType::kBFloat16 : OutputType::kFloat16;
  return p;
}

std::string variant_list() {
  std::ostringstream names;
  names << "auto, fast";
  for (int i = 0; i < attention_variant_count(); ++i) names << ", " << attention_variant_name(i);
  return names.str();
}

// "pipe3+swizzle" and "swizzle+pipe3"... name the same build: the base name first, then toggles sorted.
std::string canonical_variant(c10::string_view variant) {
  std::vector<std::string> parts;
  std::stringstream stream{std::string(variant)};
  for (std::string part; std::getline(stream, part, '+');) parts.push_back(part);
  if (parts.size() > 2) std::sort(parts.begin() + 1, parts.end());
  std::string name;
  for (const std::string& part : parts) name += (name.empty() ? "" : "+") + part;
  return name;
}

int resolve_variant(c10::string_view variant, const AttentionParams& p, int sm) {
  if (variant == "auto") return auto_attention_variant(p, sm);
  if (variant == "fast") return fast_attention_variant(p, sm);
  const int index = find_attention_variant(canonical_variant(variant).c_str());
  TORCH_CHECK(index >= 0, "variant '", variant, "' is unknown or that toggle combination is not built; valid variants: ",
              variant_list());
  TORCH_CHECK(attention_variant_runs_on(index, sm), "variant '", variant, "' needs ", attention_variant_archs(index),
              "; this GPU is sm_", sm);
  TORCH_CHECK(attention_variant_aligned(index, p), "variant '", variant,
              "' needs q, k and v rows aligned to 16 bytes (data_ptr and batch/head/row strides multiples of 16 "
              "bytes", attention_variant_uses_tma(index) ? ", and no stride 0 on a dimension longer than 1" : "",
              "); use variant='auto' or 'scalar' for these inputs");
  return index;
}

void fp8_forward_into_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& q_scale,
                           const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& out,
                           const at::Tensor& lse, bool is_causal, std::optional<double> scale,
                           c10::string_view variant) {
  const AttentionDims d = check_attention_inputs(q, k, v, q_scale, k_scale, v_scale);
  check_attention_outputs(out, lse, q, d);
  TORCH_CHECK(d.seqlen_q <= INT_MAX / 16 && d.seqlen_k <= INT_MAX / 16 && d.batch * d.heads_q * d.seqlen_q <= INT_MAX,
              "q and k: B * Hq * Sq and Sk must fit the kernel's 32-bit indexing, got q ", q.sizes(), " and k ",
              k.sizes());
  const c10::cuda::CUDAGuard guard(q.device());
  // Scales are tiny; the kernels read them as contiguous [B, H] arrays.
  const at::Tensor qs = q_scale.contiguous(), ks = k_scale.contiguous(), vs = v_scale.contiguous();
  AttentionParams p =
      make_params(q, k, v, qs, ks, vs, out, lse, d, is_causal, resolve_softmax_scale(scale, d.head_dim));
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(q.device().index());
  const int sm = prop->major * 10 + prop->minor;
  p.overlap_launch = sm >= 90;
  const int index = resolve_variant(variant, p, sm);
  // Freed when this returns: the caching allocator hands it out again only to work queued after the kernel.
  at::Tensor workspace;
  if (const int64_t bytes = attention_workspace_bytes(index, p); bytes > 0) {
    workspace = at::empty({bytes}, q.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
  }
  const cudaError_t err = launch_attention(p, index, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "sdpa::fp8_forward: launch of variant '", attention_variant_name(index),
              "' failed: ", cudaGetErrorString(err));
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CUDA, m) {
  m.impl("fp8_forward", &forward_functional<&fp8_forward_into_cuda>);
  m.impl("fp8_forward_into", &fp8_forward_into_cuda);
}

}  // namespace sdpa
