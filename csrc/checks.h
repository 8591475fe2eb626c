// Input checks shared by the CPU and CUDA implementations. Every failure names the argument and what was
// expected, and raises (RuntimeError in Python) before any kernel runs.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace sdpa {

struct AttentionDims {
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
};

inline void check_codes(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kByte, name,
              " must be torch.float8_e4m3fn or torch.uint8 holding E4M3 codes, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 4, name, " must have 4 dims [B, H, S, D], got ", t.dim(), " dims (shape ", t.sizes(), ")");
  TORCH_CHECK(t.numel() > 0, name, " must be non-empty, got shape ", t.sizes());
  TORCH_CHECK(t.stride(3) == 1, name, " must have a contiguous last dim (stride(-1) == 1), got strides ",
              t.strides());
}

// `t` (named `name` in the error) on the device of `reference` (named `reference_name`).
inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& reference,
                              const char* reference_name = "q") {
  TORCH_CHECK(t.device() == reference.device(), name, " must be on the same device as ", reference_name, " (",
              reference.device(), "), got ", t.device());
}

inline void check_scale(const at::Tensor& scale, const char* name, int64_t batch, int64_t heads, const char* heads_name) {
  TORCH_CHECK(scale.scalar_type() == at::kFloat, name, " must be torch.float32, got ", scale.scalar_type());
  TORCH_CHECK(scale.dim() == 2 && scale.size(0) == batch && scale.size(1) == heads, name, " must have shape [B, ",
              heads_name, "] = [", batch, ", ", heads, "], got ", scale.sizes());
}

// fp16 or bf16: the outputs' dtypes, and the values the kernels that quantize q's rows read.
inline bool is_16_bit_float(at::ScalarType dtype) { return dtype == at::kHalf || dtype == at::kBFloat16; }
// fp16, bf16 or fp32: what the quantizers take.
inline bool is_quantizable(at::ScalarType dtype) { return is_16_bit_float(dtype) || dtype == at::kFloat; }

// q may also hold values (fp16, bf16 or fp32) that the op quantizes per head itself, as quantize_fp8 would.
inline bool is_float_query(const at::Tensor& q) { return is_quantizable(q.scalar_type()); }

inline void check_query(const at::Tensor& q, const std::optional<at::Tensor>& q_scale) {
  if (!is_float_query(q)) {
    TORCH_CHECK(q.scalar_type() == at::kFloat8_e4m3fn || q.scalar_type() == at::kByte,
                "q must be E4M3 codes (torch.float8_e4m3fn or torch.uint8) or torch.float16, torch.bfloat16 or "
                "torch.float32 values to quantize, got ", q.scalar_type());
    TORCH_CHECK(q_scale.has_value(), "q_scale is required when q holds E4M3 codes (it may be None only for "
                "float16, bfloat16 or float32 q, which is then quantized per head)");
  }
  TORCH_CHECK(q.dim() == 4, "q must have 4 dims [B, H, S, D], got ", q.dim(), " dims (shape ", q.sizes(), ")");
  TORCH_CHECK(q.numel() > 0, "q must be non-empty, got shape ", q.sizes());
  TORCH_CHECK(q.stride(3) == 1, "q must have a contiguous last dim (stride(-1) == 1), got strides ", q.strides());
}

enum class CausalAlignment { kTopLeft, kBottomRight };

inline CausalAlignment parse_causal_alignment(c10::string_view alignment) {
  if (alignment == "top_left") return CausalAlignment::kTopLeft;
  TORCH_CHECK(alignment == "bottom_right", "causal_alignment must be 'top_left' or 'bottom_right', got '", alignment,
              "'");
  return CausalAlignment::kBottomRight;
}

// How a q of values is quantized: per head, as quantize_fp8 does (q_quantization="per_head", the default), or by
// the kernel with a scale per 16 rows ("per_16_rows": fp16 / bf16 values, q_scale None, head dims up to 128). Only
// the kernels that quantize q read a q narrower than k (narrow_query).
enum class QueryQuantization { kPerHead, kPer16Rows };

inline QueryQuantization parse_q_quantization(c10::string_view mode, const at::Tensor& q,
                                              const std::optional<at::Tensor>& q_scale, const AttentionDims& d) {
  TORCH_CHECK(mode == "per_head" || mode == "per_16_rows", "q_quantization must be 'per_head' or 'per_16_rows', "
              "got '", mode, "'");
  TORCH_CHECK(q.size(3) == d.head_dim || mode == "per_16_rows", "q with fewer dims (", q.size(3),
              ") than k and v (", d.head_dim, ") needs q_quantization='per_16_rows'");
  if (mode == "per_head") return QueryQuantization::kPerHead;
  TORCH_CHECK(is_16_bit_float(q.scalar_type()),
              "q_quantization='per_16_rows' needs q of torch.float16 or torch.bfloat16 values, got ", q.scalar_type());
  TORCH_CHECK(!q_scale.has_value(), "q_quantization='per_16_rows' takes the scale of each 16 rows from q itself: "
              "q_scale must be None");
  TORCH_CHECK(d.head_dim <= 128, "q_quantization='per_16_rows' needs head dim 64 or 128, got ", d.head_dim);
  return QueryQuantization::kPer16Rows;
}

// Bottom-right causal rows that see no key (Sq > Sk without seqlens_k: rows i < Sq - Sk). On CUDA they get 0 and an
// lse of -inf on the host, and the kernels run on the other rows, whose alignment is then top-left; with seqlens_k
// only the decode kernel runs, and it handles such rows per batch itself. q's groups of 16 rows (per_16_rows)
// count from the first row after them.
inline int64_t rows_before_first_key(const AttentionDims& d, bool is_causal, bool bottom_right, bool has_seqlens) {
  return is_causal && bottom_right && !has_seqlens ? std::max<int64_t>(0, d.seqlen_q - d.seqlen_k) : 0;
}

inline void check_seqlens_k(const at::Tensor& seqlens_k, const at::Tensor& q) {
  check_same_device(seqlens_k, "seqlens_k", q);
  TORCH_CHECK(seqlens_k.scalar_type() == at::kInt, "seqlens_k must be torch.int32, got ", seqlens_k.scalar_type());
  TORCH_CHECK(seqlens_k.dim() == 1 && seqlens_k.size(0) == q.size(0), "seqlens_k must have shape [B] = [", q.size(0),
              "], got ", seqlens_k.sizes());
}

// A q of fp16 / bf16 values may have fewer dims than k and v (a multiple of 8; q_quantization='per_16_rows'): the
// kernels read it as zero-padded to their D, for head dims whose k and v codes were padded (quantize_fp8_kv's
// codes_width) while the kernel quantizes q's rows itself.
inline bool narrow_query(const at::Tensor& q, const at::Tensor& k) {
  return is_16_bit_float(q.scalar_type()) && q.dim() == 4 && k.dim() == 4 &&
         q.size(3) < k.size(3) && q.size(3) > 0 && q.size(3) % 8 == 0;
}

inline AttentionDims check_attention_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const std::optional<at::Tensor>& q_scale, const at::Tensor& k_scale,
                                            const at::Tensor& v_scale,
                                            const std::optional<at::Tensor>& seqlens_k = std::nullopt) {
  check_query(q, q_scale);
  check_codes(k, "k");
  check_codes(v, "v");
  check_same_device(k, "k", q);
  check_same_device(v, "v", q);
  if (q_scale.has_value()) check_same_device(*q_scale, "q_scale", q);
  check_same_device(k_scale, "k_scale", q);
  check_same_device(v_scale, "v_scale", q);

  const int64_t head_dim = narrow_query(q, k) ? k.size(3) : q.size(3);
  const AttentionDims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), head_dim};
  TORCH_CHECK(d.head_dim == 64 || d.head_dim == 128 || d.head_dim == 256, head_dim == q.size(3) ? "q" : "k",
              ": head dim (size(-1)) must be 64, 128 or 256, got ", d.head_dim);
  TORCH_CHECK(k.size(0) == d.batch && k.size(3) == d.head_dim, "k must have shape [B, Hkv, Sk, D] with B = ", d.batch,
              " and D = ", d.head_dim, " as in q, got ", k.sizes());
  TORCH_CHECK(v.sizes() == k.sizes(), "v must have the same shape as k ", k.sizes(), ", got ", v.sizes());
  TORCH_CHECK(d.heads_q % d.heads_kv == 0, "q heads (", d.heads_q, ") must be a multiple of k/v heads (", d.heads_kv,
              ") for grouped-query attention");
  if (q_scale.has_value()) check_scale(*q_scale, "q_scale", d.batch, d.heads_q, "Hq");
  check_scale(k_scale, "k_scale", d.batch, d.heads_kv, "Hkv");
  check_scale(v_scale, "v_scale", d.batch, d.heads_kv, "Hkv");
  if (seqlens_k.has_value()) check_seqlens_k(*seqlens_k, q);
  return d;
}

inline void check_attention_outputs(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& q,
                                    const AttentionDims& d) {
  check_same_device(out, "out", q);
  check_same_device(lse, "lse", q);
  TORCH_CHECK(is_16_bit_float(out.scalar_type()), "out must be torch.float16 or torch.bfloat16, got ",
              out.scalar_type());
  // A narrower out takes the first out.size(3) dims of each row: v's true dims where they were zero-padded to D.
  const bool out_dims_ok = out.size(3) == d.head_dim || (out.size(3) > 0 && out.size(3) < d.head_dim &&
                                                         out.size(3) % 8 == 0);
  TORCH_CHECK(out.dim() == 4 && out.size(0) == d.batch && out.size(1) == d.heads_q && out.size(2) == d.seqlen_q &&
                  out_dims_ok,
              "out must have shape [B, Hq, Sq, D] = [", d.batch, ", ", d.heads_q, ", ", d.seqlen_q, ", ", d.head_dim,
              "] (or fewer dims than D, a multiple of 8), got ", out.sizes());
  TORCH_CHECK(out.stride(3) == 1, "out must have a contiguous last dim, got strides ", out.strides());
  TORCH_CHECK(lse.scalar_type() == at::kFloat, "lse must be torch.float32, got ", lse.scalar_type());
  TORCH_CHECK(lse.sizes() == at::IntArrayRef({d.batch, d.heads_q, d.seqlen_q}), "lse must have shape [B, Hq, Sq] = [",
              d.batch, ", ", d.heads_q, ", ", d.seqlen_q, "], got ", lse.sizes());
}

inline at::ScalarType resolve_out_dtype(std::optional<at::ScalarType> out_dtype) {
  const at::ScalarType dtype = out_dtype.value_or(at::kHalf);
  TORCH_CHECK(is_16_bit_float(dtype), "out_dtype must be torch.float16 or torch.bfloat16, got ", dtype);
  return dtype;
}

inline float resolve_softmax_scale(std::optional<double> scale, int64_t head_dim) {
  const double value = scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  TORCH_CHECK(std::isfinite(value), "scale must be finite, got ", value);
  return static_cast<float>(value);
}

// `name` is the argument's name in error messages: x for quantize_fp8, q, k or v for quantize_fp8_qkv.
inline void check_quantize_inputs(const at::Tensor& x, const std::optional<at::Tensor>& scale,
                                  const char* name = "x") {
  TORCH_CHECK(is_quantizable(x.scalar_type()), name, " must be torch.float16, torch.bfloat16 or torch.float32, got ",
              x.scalar_type());
  TORCH_CHECK(x.dim() == 4, name, " must have 4 dims [B, H, S, D], got ", x.dim(), " dims (shape ", x.sizes(), ")");
  TORCH_CHECK(x.numel() > 0, name, " must be non-empty, got shape ", x.sizes());
  if (scale.has_value()) {
    TORCH_CHECK(scale->device() == x.device(), "scale must be on the same device as ", name, " (", x.device(),
                "), got ", scale->device());
    check_scale(*scale, "scale", x.size(0), x.size(1), "H");
  }
}

// quantize_fp8_qkv: each of q, k, v a valid quantize_fp8 input, all of q's dtype and on q's device.
// Tensors quantized in one call (quantize_fp8_qkv, quantize_fp8_kv): each a quantize_fp8 input, all of the first's
// dtype and device.
template <int kCount>
inline void check_quantize_batch_inputs(const at::Tensor (&inputs)[kCount], const char* const (&names)[kCount]) {
  for (int t = 0; t < kCount; ++t) {
    check_quantize_inputs(inputs[t], std::nullopt, names[t]);
    TORCH_CHECK(inputs[t].scalar_type() == inputs[0].scalar_type(), names[t], " must have the dtype of ", names[0],
                " (", inputs[0].scalar_type(), "), got ", inputs[t].scalar_type());
    check_same_device(inputs[t], names[t], inputs[0], names[0]);
  }
}
// codes_width (quantize_fp8_qkv, quantize_fp8_kv): the codes' head dim, zero-padded from D, a multiple of 8 (whole
// 8-byte stores).
inline void check_codes_width(std::optional<int64_t> codes_width, int64_t head_dim) {
  TORCH_CHECK(!codes_width.has_value() || (*codes_width >= head_dim && *codes_width % 8 == 0),
              "codes_width must be a multiple of 8 of at least the head dim (", head_dim, "), got ",
              codes_width.value_or(0));
}
inline void check_quantize_qkv_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      std::optional<int64_t> codes_width = std::nullopt) {
  check_quantize_batch_inputs({q, k, v}, {"q", "k", "v"});
  check_codes_width(codes_width, std::max({q.size(3), k.size(3), v.size(3)}));
}
inline void check_quantize_kv_inputs(const at::Tensor& k, const at::Tensor& v,
                                     std::optional<int64_t> codes_width = std::nullopt) {
  check_quantize_batch_inputs({k, v}, {"k", "v"});
  check_codes_width(codes_width, std::max(k.size(3), v.size(3)));
}

// kv_cache_append: k and v [B, H, T, D] values of one dtype, the caches [B, H, capacity, D] E4M3 codes, the scales
// [B, H] float32, start [B] int32 and the optional key shift [B, H, D] float32, all on k's device.
inline void check_kv_cache_append_inputs(const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_cache,
                                         const at::Tensor& v_cache, const at::Tensor& k_scale,
                                         const at::Tensor& v_scale, const at::Tensor& start,
                                         const std::optional<at::Tensor>& k_shift) {
  check_quantize_inputs(k, std::nullopt, "k");
  check_quantize_inputs(v, std::nullopt, "v");
  TORCH_CHECK(v.scalar_type() == k.scalar_type(), "v must have the dtype of k (", k.scalar_type(), "), got ",
              v.scalar_type());
  TORCH_CHECK(v.sizes() == k.sizes(), "v must have the shape of k ", k.sizes(), ", got ", v.sizes());
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, "k and v must have a contiguous last dim, got strides ",
              k.strides(), " and ", v.strides());
  check_codes(k_cache, "k_cache");
  check_codes(v_cache, "v_cache");
  TORCH_CHECK(k_cache.size(0) == k.size(0) && k_cache.size(1) == k.size(1) && k_cache.size(3) == k.size(3),
              "k_cache must have shape [B, H, capacity, D] with B, H, D of k ", k.sizes(), ", got ", k_cache.sizes());
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes(), "v_cache must have the shape of k_cache ", k_cache.sizes(), ", got ",
              v_cache.sizes());
  check_same_device(v, "v", k, "k");
  check_same_device(k_cache, "k_cache", k, "k");
  check_same_device(v_cache, "v_cache", k, "k");
  check_same_device(k_scale, "k_scale", k, "k");
  check_same_device(v_scale, "v_scale", k, "k");
  check_same_device(start, "start", k, "k");
  check_scale(k_scale, "k_scale", k.size(0), k.size(1), "H");
  check_scale(v_scale, "v_scale", k.size(0), k.size(1), "H");
  TORCH_CHECK(start.scalar_type() == at::kInt && start.dim() == 1 && start.size(0) == k.size(0),
              "start must be a torch.int32 tensor of shape [B] = [", k.size(0), "], got ", start.scalar_type(), " ",
              start.sizes());
  if (k_shift.has_value()) {
    check_same_device(*k_shift, "k_shift", k, "k");
    TORCH_CHECK(k_shift->scalar_type() == at::kFloat &&
                    k_shift->sizes() == at::IntArrayRef({k.size(0), k.size(1), k.size(3)}),
                "k_shift must be a torch.float32 tensor of shape [B, H, D] = [", k.size(0), ", ", k.size(1), ", ",
                k.size(3), "], got ", k_shift->scalar_type(), " ", k_shift->sizes());
  }
}

}  // namespace sdpa
