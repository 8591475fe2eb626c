// CPU implementation of sdpa::fp8_forward: reference quality, fp32 throughout, one query row per task.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "../checks.h"
#include "../forward.h"
#include "../kernels/common/fp8.h"

namespace sdpa {
namespace {

// q quantized in groups of 16 rows from row `first` on (q_quantization="per_16_rows"), each group under the power
// of two of its amax (power_of_two_scale; NaN ignored, as the kernels' fmaxf does): codes [B, Hq, Sq, D] and the
// scale of every row [B, Hq, Sq]; rows before `first` see no key, and their codes are 0. A q of fewer dims than
// head_dim (narrow_query) is zero-padded to it.
std::tuple<at::Tensor, at::Tensor> quantize_query_rows(const at::Tensor& q, int64_t first, int64_t head_dim) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = head_dim, rows = S - first;
  const int64_t groups = (rows + 15) / 16;
  at::Tensor x = at::zeros({B, H, groups * 16, D}, q.options());
  x.narrow(2, 0, rows).narrow(3, 0, q.size(3)).copy_(q.narrow(2, first, rows));
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor magnitudes = at::nan_to_num(x.to(at::kFloat).abs(), 0.0, inf, -inf);
  at::Tensor scales = magnitudes.view({B, H * groups, 16 * D}).amax(-1).contiguous();
  float* scale = scales.data_ptr<float>();
  for (int64_t g = 0; g < scales.numel(); ++g) scale[g] = power_of_two_scale(scale[g]);
  const auto [group_codes, group_scale] = quantize_query(x.view({B, H * groups, 16, D}), scales);
  at::Tensor codes = at::zeros({B, H, S, D}, group_codes.options());
  codes.narrow(2, first, rows).copy_(group_codes.view({B, H, groups * 16, D}).narrow(2, 0, rows));
  const at::Tensor scale_of_rows = group_scale.view({B, H, groups, 1}).expand({B, H, groups, 16});
  at::Tensor row_scale = at::ones({B, H, S}, group_scale.options());
  row_scale.narrow(2, first, rows).copy_(scale_of_rows.reshape({B, H, groups * 16}).narrow(2, 0, rows));
  return {codes, row_scale};
}

// All 256 codes decoded once; E4M3 -> float is exact.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// Decoded codes (not yet multiplied by the per-head scale) as a contiguous float tensor.
at::Tensor decode_codes(const at::Tensor& codes) {
  const at::Tensor bytes = codes.view(at::kByte).contiguous();
  at::Tensor values = at::empty(bytes.sizes(), bytes.options().dtype(at::kFloat));
  const uint8_t* src = bytes.data_ptr<uint8_t>();
  float* dst = values.data_ptr<float>();
  const auto& table = e4m3_table();
  at::parallel_for(0, bytes.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = table[src[i]];
  });
  return values;
}

// Keys [0, visible) that query row i of seqlen_q sees, with `keys` keys in use: every one, or those on or below the
// causal diagonal, aligned top-left (i sees j <= i) or bottom-right (i sees j <= i + keys - seqlen_q).
int64_t visible_keys(int64_t i, int64_t seqlen_q, int64_t keys, bool is_causal, bool bottom_right) {
  if (!is_causal) return keys;
  const int64_t last = i + (bottom_right ? keys - seqlen_q : 0);
  return std::clamp<int64_t>(last + 1, 0, keys);
}

void fp8_forward_into_cpu(const at::Tensor& q_in, const at::Tensor& k, const at::Tensor& v,
                          const std::optional<at::Tensor>& q_scale_in, const at::Tensor& k_scale,
                          const at::Tensor& v_scale, const at::Tensor& out, const at::Tensor& lse, bool is_causal,
                          std::optional<double> scale, c10::string_view variant,
                          const std::optional<at::Tensor>& seqlens_k, c10::string_view causal_alignment,
                          c10::string_view q_quantization) {
  const AttentionDims d = check_attention_inputs(q_in, k, v, q_scale_in, k_scale, v_scale, seqlens_k);
  check_attention_outputs(out, lse, q_in, d);
  const bool bottom_right = parse_causal_alignment(causal_alignment) == CausalAlignment::kBottomRight;
  TORCH_CHECK(variant == "auto" || variant == "fast", "variant '", variant,
              "' is not available on CPU: the CPU implementation (fp32, both tiers) accepts only variant='auto' or "
              "'fast'");
  const float softmax_scale = resolve_softmax_scale(scale, d.head_dim);
  const bool row_groups = parse_q_quantization(q_quantization, q_in, q_scale_in, d) == QueryQuantization::kPer16Rows;
  const at::Tensor lengths = seqlens_k.has_value() ? seqlens_k->contiguous() : at::Tensor();
  // Codes of q and the scale of each of its rows [B, Hq, Sq].
  const auto [q, q_row_scale] = [&]() -> std::tuple<at::Tensor, at::Tensor> {
    if (row_groups) {
      return quantize_query_rows(q_in, rows_before_first_key(d, is_causal, bottom_right, lengths.defined()),
                                 d.head_dim);
    }
    const auto [codes, head_scale] = is_float_query(q_in) ? quantize_query(q_in, q_scale_in)
                                                          : std::make_tuple(q_in, *q_scale_in);
    return {codes, head_scale.unsqueeze(-1).expand({d.batch, d.heads_q, d.seqlen_q})};
  }();

  const at::Tensor qf = decode_codes(q), kf = decode_codes(k), vf = decode_codes(v);
  const at::Tensor qs = q_row_scale.contiguous(), ks = k_scale.contiguous(), vs = v_scale.contiguous();
  at::Tensor out_f = at::empty({d.batch, d.heads_q, d.seqlen_q, d.head_dim}, out.options().dtype(at::kFloat));
  at::Tensor lse_f = at::empty(lse.sizes(), lse.options());

  const int64_t D = d.head_dim, Sq = d.seqlen_q, Sk = d.seqlen_k, group = d.heads_q / d.heads_kv;
  const float *q_ptr = qf.data_ptr<float>(), *k_ptr = kf.data_ptr<float>(), *v_ptr = vf.data_ptr<float>();
  const float *qs_ptr = qs.data_ptr<float>(), *ks_ptr = ks.data_ptr<float>(), *vs_ptr = vs.data_ptr<float>();
  float *out_ptr = out_f.data_ptr<float>(), *lse_ptr = lse_f.data_ptr<float>();
  const int* lengths_ptr = lengths.defined() ? lengths.data_ptr<int>() : nullptr;

  const int64_t rows = d.batch * d.heads_q * Sq;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / (Sk * D));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> prob(Sk);
    std::vector<float> acc(D);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % Sq, head_q = r / Sq, b = head_q / d.heads_q;
      const int64_t head_kv = b * d.heads_kv + (head_q % d.heads_q) / group;
      const float* q_row = q_ptr + r * D;
      const float* k_head = k_ptr + head_kv * Sk * D;
      const float* v_head = v_ptr + head_kv * Sk * D;
      const float score_scale = qs_ptr[r] * ks_ptr[head_kv] * softmax_scale;
      const int64_t keys = lengths.defined() ? std::clamp<int64_t>(lengths_ptr[b], 0, Sk) : Sk;
      const int64_t visible = visible_keys(i, Sq, keys, is_causal, bottom_right);
      if (visible == 0) {  // a row that sees no key: 0, and the logsumexp of nothing
        std::fill(out_ptr + r * D, out_ptr + (r + 1) * D, 0.0f);
        lse_ptr[r] = -std::numeric_limits<float>::infinity();
        continue;
      }

      float row_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        float dot = 0.0f;
        for (int64_t c = 0; c < D; ++c) dot += q_row[c] * k_head[j * D + c];
        prob[j] = dot * score_scale;
        row_max = std::max(row_max, prob[j]);
      }
      float row_sum = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < visible; ++j) {
        const float p = std::exp(prob[j] - row_max);
        row_sum += p;
        for (int64_t c = 0; c < D; ++c) acc[c] += p * v_head[j * D + c];
      }
      const float out_scale = vs_ptr[head_kv] / row_sum;
      for (int64_t c = 0; c < D; ++c) out_ptr[r * D + c] = acc[c] * out_scale;
      lse_ptr[r] = row_max + std::log(row_sum);
    }
  });
  out.copy_(out_f.narrow(3, 0, out.size(3)));  // a narrower out: the first dims
  lse.copy_(lse_f);
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CPU, m) {
  m.impl("fp8_forward", &forward_functional<&fp8_forward_into_cpu>);
  m.impl("fp8_forward_into", &fp8_forward_into_cpu);
}

}  // namespace sdpa
