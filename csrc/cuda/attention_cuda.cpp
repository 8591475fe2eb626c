// CUDA host side of sdpa::fp8_forward: checks, params, variant choice, launch on the current stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../checks.h"
#include "../forward.h"
#include "../kernels/dispatch/launch.h"

namespace sdpa {
namespace {

QueryType query_type(const at::Tensor& q) {
  switch (q.scalar_type()) {
    case at::kFloat:
      return QueryType::kFloat32;
    case at::kHalf:
      return QueryType::kFloat16;
    case at::kBFloat16:
      return QueryType::kBFloat16;
    default:
      return QueryType::kCodes;
  }
}

// q_scale is undefined for a q of values that the kernel quantizes with amax / 448.
AttentionParams make_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& q_scale,
                            const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& out,
                            const at::Tensor& lse, const at::Tensor& seqlens_k, bool is_causal, bool bottom_right,
                            float softmax_scale) {
  AttentionParams p{};
  p.q = static_cast<const uint8_t*>(q.data_ptr());
  p.k = static_cast<const uint8_t*>(k.data_ptr());
  p.v = static_cast<const uint8_t*>(v.data_ptr());
  p.q_scale = q_scale.defined() ? q_scale.data_ptr<float>() : nullptr;
  p.k_scale = k_scale.data_ptr<float>();
  p.v_scale = v_scale.data_ptr<float>();
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.seqlens_k = seqlens_k.defined() ? seqlens_k.data_ptr<int>() : nullptr;
  p.q_batch_stride = q.stride(0), p.q_head_stride = q.stride(1), p.q_row_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_head_stride = k.stride(1), p.k_row_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_head_stride = v.stride(1), p.v_row_stride = v.stride(2);
  p.out_batch_stride = out.stride(0), p.out_head_stride = out.stride(1), p.out_row_stride = out.stride(2);
  p.lse_batch_stride = lse.stride(0), p.lse_head_stride = lse.stride(1), p.lse_row_stride = lse.stride(2);
  p.batch = static_cast<int>(q.size(0));
  p.heads_q = static_cast<int>(q.size(1));
  p.heads_kv = static_cast<int>(k.size(1));
  p.seqlen_q = static_cast<int>(q.size(2));
  p.seqlen_k = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(k.size(3));
  p.q_dims = static_cast<int>(q.size(3));
  p.out_dims = static_cast<int>(out.size(3));
  p.softmax_scale = softmax_scale;
  p.is_causal = is_causal;
  p.causal_bottom_right = is_causal && bottom_right;
  // Without seqlens_k every batch has seqlen_k keys; the caller keeps seqlen_k >= seqlen_q here.
  p.causal_offset = p.causal_bottom_right && p.seqlens_k == nullptr ? p.seqlen_k - p.seqlen_q : 0;
  p.q_type = query_type(q);
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
  TORCH_CHECK(p.seqlens_k == nullptr || attention_variant_takes_seqlens(index), "variant '", variant,
              "' does not take seqlens_k; use variant='auto' or 'decode' for per-sequence key lengths");
  TORCH_CHECK(attention_variant_takes_head_dim(index, p.head_dim), "variant '", variant,
              "' is built for head dims 64 and 128, got ", p.head_dim, "; use variant='auto' or one that "
              "sdpa_ext.variant_names(head_dim=", p.head_dim, ") lists");
  TORCH_CHECK(attention_variant_aligned(index, p), "variant '", variant,
              "' needs q, k and v rows aligned to 16 bytes (data_ptr and batch/head/row strides multiples of 16 "
              "bytes", attention_variant_uses_tma(index) ? ", and no stride 0 on a dimension longer than 1" : "",
              "); use variant='auto' or 'scalar' for these inputs");
  return index;
}

void fp8_forward_into_cuda(const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& q_scale_in, const at::Tensor& k_scale,
                           const at::Tensor& v_scale, const at::Tensor& out_in, const at::Tensor& lse_in,
                           bool is_causal, std::optional<double> scale, c10::string_view variant,
                           const std::optional<at::Tensor>& seqlens_k, c10::string_view causal_alignment,
                           c10::string_view q_quantization) {
  const AttentionDims d = check_attention_inputs(q_in, k, v, q_scale_in, k_scale, v_scale, seqlens_k);
  check_attention_outputs(out_in, lse_in, q_in, d);
  const bool bottom_right = parse_causal_alignment(causal_alignment) == CausalAlignment::kBottomRight;
  const bool row_groups = parse_q_quantization(q_quantization, q_in, q_scale_in, d) == QueryQuantization::kPer16Rows;
  TORCH_CHECK(d.seqlen_q <= INT_MAX / 16 && d.seqlen_k <= INT_MAX / 16 && d.batch * d.heads_q * d.seqlen_q <= INT_MAX,
              "q and k: B * Hq * Sq and Sk must fit the kernel's 32-bit indexing, got q ", q_in.sizes(), " and k ",
              k.sizes());
  const c10::cuda::CUDAGuard guard(q_in.device());
  const float softmax_scale = resolve_softmax_scale(scale, d.head_dim);
  const at::Tensor lengths = seqlens_k.has_value() ? seqlens_k->contiguous() : at::Tensor();
  at::Tensor q = q_in, q_scale = q_scale_in.has_value() ? q_scale_in->contiguous() : at::Tensor();
  at::Tensor out = out_in, lse = lse_in;
  if (const int64_t hidden = rows_before_first_key(d, is_causal, bottom_right, lengths.defined()); hidden > 0) {
    // Quantized first, so that the scale of q is that of the whole head, as quantize_fp8 gives it.
    if (is_float_query(q) && !row_groups) std::tie(q, q_scale) = quantize_query(q, q_scale_in);
    out.narrow(2, 0, hidden).zero_();
    lse.narrow(2, 0, hidden).fill_(-std::numeric_limits<float>::infinity());
    q = q.narrow(2, hidden, d.seqlen_k);
    out = out.narrow(2, hidden, d.seqlen_k);
    lse = lse.narrow(2, hidden, d.seqlen_k);
  }
  const at::Tensor ks = k_scale.contiguous(), vs = v_scale.contiguous();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(q.device().index());
  const int sm = prop->major * 10 + prop->minor;
  auto params = [&] {
    AttentionParams p =
        make_params(q, k, v, q_scale, ks, vs, out, lse, lengths, is_causal, bottom_right, softmax_scale);
    p.overlap_launch = sm >= 90;
    p.q_row_groups = row_groups && is_float_query(q);
    return p;
  };
  AttentionParams p = params();
  // The kernels that quantize q's rows (the Hopper ones) read them by 16-byte loads, and auto takes them only where
  // a TMA descriptor steps over q's dimensions: rows they cannot read as they are (misaligned, broadcast) are copied.
  static const int wgmma = find_attention_variant("wgmma");
  if (p.q_row_groups && !attention_variant_reads_q(wgmma, p)) {
    q = q.clone(at::MemoryFormat::Contiguous);
    p = params();
  }
  const int index = resolve_variant(variant, p, sm);
  TORCH_CHECK(p.seqlens_k == nullptr || attention_variant_takes_seqlens(index),
              "seqlens_k needs the decode kernel, which needs k and v rows aligned to 16 bytes (data_ptr and "
              "batch/head/row strides multiples of 16 bytes)");
  if (p.q_type != QueryType::kCodes && !attention_variant_quantizes_q(index, p)) {
    TORCH_CHECK(!row_groups, "variant '", attention_variant_name(index), "' does not quantize q itself: "
                "q_quantization='per_16_rows' needs a Hopper kernel (wgmma*, sm_90) or decode (up to 16 query rows)");
    std::tie(q, q_scale) = quantize_query(q, q_scale_in);
    p = params();
  }
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
