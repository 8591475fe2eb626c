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
};

constexpr VariantEntry kVariants[] = {
    {"scalar", &launch_scalar, false},
    {"cp_async", &launch_cp_async, true},
    {"wmma", &launch_wmma, false},
    {"fused_softmax", &launch_fused_softmax, true},
    {"fused_softmax+swizzle", &launch_fused_softmax_swizzle, true},
    {"pipe3", &launch_pipe3, true},
    {"pipe3+swizzle", &launch_pipe3_swizzle, true},
    {"warp_spec", &launch_warp_spec, true},
    {"warp_spec+swizzle", &launch_warp_spec_swizzle, true},
    {"warp_spec+2producers", &launch_warp_spec_2producers, true},
    {"warp_spec+2producers+swizzle", &launch_warp_spec_2producers_swizzle, true},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);

bool rows_aligned(const uint8_t* base, int64_t batch_stride, int64_t head_stride, int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && batch_stride % 16 == 0 && head_stride % 16 == 0 &&
         row_stride % 16 == 0;
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

bool attention_variant_runs_on(int variant, const AttentionParams& p) {
  return !kVariants[variant].needs_aligned_rows ||
         (rows_aligned(p.q, p.q_batch_stride, p.q_head_stride, p.q_row_stride) &&
          rows_aligned(p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride) &&
          rows_aligned(p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride));
}

int auto_attention_variant(const AttentionParams& p, int) {
  const int fastest = find_attention_variant("fused_softmax+swizzle");
  return attention_variant_runs_on(fastest, p) ? fastest : find_attention_variant("scalar");
}

cudaError_t launch_attention(const AttentionParams& params, int variant, cudaStream_t stream) {
  if (variant < 0 || variant >= kVariantCount) return cudaErrorInvalidValue;
  return kVariants[variant].launch(params, stream);
}

}  // namespace sdpa
