// The variant table: every built name[+toggle...] with its launcher, and the choice behind variant="auto".
#include <cstring>

#include "launch.h"
#include "variant_launchers.h"

namespace sdpa {
namespace {

struct VariantEntry {
  const char* name;  // base name, then toggles in sorted order, joined by '+'
  AttentionLauncher launch;
  bool needs_aligned_rows;  // 16-byte loads (cp.async or vector loads) of q, k and v rows
  int min_sm;               // FP8 mma.sync needs sm_89
};

constexpr VariantEntry kVariants[] = {
    {"scalar", &launch_scalar, false, 80},
    {"cp_async", &launch_cp_async, true, 80},
    {"wmma", &launch_wmma, false, 80},
    {"fused_softmax", &launch_fused_softmax, true, 80},
    {"fused_softmax+swizzle", &launch_fused_softmax_swizzle, true, 80},
    {"pipe3", &launch_pipe3, true, 80},
    {"pipe3+swizzle", &launch_pipe3_swizzle, true, 80},
    {"warp_spec", &launch_warp_spec, true, 80},
    {"warp_spec+swizzle", &launch_warp_spec_swizzle, true, 80},
    {"warp_spec+2producers", &launch_warp_spec_2producers, true, 80},
    {"warp_spec+2producers+swizzle", &launch_warp_spec_2producers_swizzle, true, 80},
    {"fp8_mma", &launch_fp8_mma, true, 89},
    {"fp8_mma_m32", &launch_fp8_mma_m32, true, 89},
    {"fp8_mma_m16", &launch_fp8_mma_m16, true, 89},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);

bool rows_aligned(const uint8_t* base, int64_t batch_stride, int64_t head_stride, int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && batch_stride % 16 == 0 && head_stride % 16 == 0 &&
         row_stride % 16 == 0;
}

// Fastest full-tier variant by head dim and key length, from `python -m sdpa_ext.bench --preset sweep [--causal]`
// (1x16xSxD, fp16 inputs) on an H200, 2026-11-21, commit eb21412 (benchmarks/results/h200-2026-11-21.md);
// applied to every arch until other GPUs are measured.
//   D = 64:  warp_spec+2producers+swizzle wins while the key loop is short: 14.0 vs 16.8 us (fused_softmax+swizzle)
//            at S = 512, 35.9 vs 40.8 us at 1024, and causal up to 4096 (311.8 vs 328.6 us), where a block has
//            few tiles and the producer warps hide their latency; from 2048 (causal 8192) fused_softmax+swizzle is
//            within 1% or ahead (1803 vs 1832 us at 8192).
//   D = 128: pipe3+swizzle is fastest or within 1% at every S, causal or not (801.7 vs 804.7 us at 4096); the
//            warp-specialized kernels fall behind (1077 us): ncu at 1x16x4096x128 shows 186 registers per
//            thread, 9.3% achieved occupancy (one 6-warp block per SM) and the tensor pipe active 20% of cycles.
const char* auto_variant_name(const AttentionParams& p) {
  if (p.head_dim == 128) return "pipe3+swizzle";
  const int short_keys = p.is_causal ? 4096 : 1024;
  return p.seqlen_k <= short_keys ? "warp_spec+2producers+swizzle" : "fused_softmax+swizzle";
}

}  // namespace

int attention_variant_count() { return kVariantCount; }

const char* attention_variant_name(int index) {
  return index >= 0 && index < kVariantCount ? kVariants[index].name : nullptr;
}

int find_attention_variant(const char* name) {
  for (int i = 0; i < kVariantCount; ++i) {
    if (std::strcmp(kVariants[i].name, name) == 0) return i;
  }
  return -1;
}

int attention_variant_min_sm(int variant) { return kVariants[variant].min_sm; }

bool attention_variant_aligned(int variant, const AttentionParams& p) {
  return !kVariants[variant].needs_aligned_rows ||
         (rows_aligned(p.q, p.q_batch_stride, p.q_head_stride, p.q_row_stride) &&
          rows_aligned(p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride) &&
          rows_aligned(p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride));
}

int auto_attention_variant(const AttentionParams& p, int sm) {
  const int fastest = find_attention_variant(auto_variant_name(p));
  return attention_variant_aligned(fastest, p) && sm >= attention_variant_min_sm(fastest)
             ? fastest
             : find_attention_variant("scalar");
}

cudaError_t launch_attention(const AttentionParams& params, int variant, cudaStream_t stream) {
  if (variant < 0 || variant >= kVariantCount) return cudaErrorInvalidValue;
  return kVariants[variant].launch(params, stream);
}

}  // namespace sdpa
