// The variant table: maps a variant name to a kernel instantiation, and head dim / output type to templates.
#include <cstring>

#include "attention_scalar.cuh"
#include "launch.h"

namespace sdpa {
namespace {

using Launcher = cudaError_t (*)(const AttentionParams&, cudaStream_t);

template <typename Variant, int kHeadDim>
cudaError_t launch_for_output(const AttentionParams& p, cudaStream_t stream) {
  if (p.out_type == OutputType::kBFloat16) return Variant::template launch<kHeadDim, __nv_bfloat16>(p, stream);
  return Variant::template launch<kHeadDim, __half>(p, stream);
}

template <typename Variant>
cudaError_t launch_variant(const AttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return launch_for_output<Variant, 64>(p, stream);
    case 128:
      return launch_for_output<Variant, 128>(p, stream);
    default:
      return cudaErrorInvalidValue;  // the host checks reject other head dims first
  }
}

struct VariantEntry {
  const char* name;
  Launcher launch;
};

constexpr VariantEntry kVariants[] = {
    {"scalar", &launch_variant<ScalarVariant>},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);

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

int auto_attention_variant(const AttentionParams&, int) { return find_attention_variant("scalar"); }

cudaError_t launch_attention(const AttentionParams& params, int variant, cudaStream_t stream) {
  if (variant < 0 || variant >= kVariantCount) return cudaErrorInvalidValue;
  return kVariants[variant].launch(params, stream);
}

}  // namespace sdpa
