// Prints the dynamic shared memory each variant launches with, per head dim: "<variant> <head_dim> <bytes>".
// Host code only (no kernel is instantiated or launched), so it runs on a machine without a GPU;
// scripts/ptxas_report.py compiles and runs it beside the ptxas pass, which sees only static shared memory.
#include <algorithm>
#include <cstdio>
#include <initializer_list>

#include "../csrc/kernels/decode/attention_decode.cuh"
#include "../csrc/kernels/fp8_mma/attention_fp8.cuh"
#include "../csrc/kernels/fp8_mma/attention_fp8_split.cuh"
#include "../csrc/kernels/hopper/wgmma_config.cuh"
#include "../csrc/kernels/ladder/attention_mma.cuh"
#include "../csrc/kernels/ladder/attention_scalar.cuh"
#include "../csrc/kernels/ladder/attention_wmma.cuh"

namespace {

using namespace sdpa;

struct VariantSmem {
  const char* name;
  int bytes;
};

void print_sizes(int head_dim, std::initializer_list<VariantSmem> sizes) {
  for (const auto& s : sizes) std::printf("%s %d %d\n", s.name, head_dim, s.bytes);
}

// decode_wgmma's 64-row warpgroup blocks; at kWideHeadDim a block has at most 32 rows (decode_row_warps).
template <int kHeadDim>
constexpr int decode_warpgroup_bytes() {
  if constexpr (kHeadDim == kWideHeadDim) return 0;
  else return DecodeConfig<kHeadDim, 4, DecodeByWgmma>::kSmemBytes;
}

// The variants built for every head dim, kWideHeadDim included.
template <int kHeadDim>
void print_wide_variant_sizes() {
  print_sizes(kHeadDim, {
      {"scalar", ScalarSmem<kHeadDim, 0>::kBytes},
      {"fused_softmax", MmaConfig<kHeadDim, 2, false, 0>::kSmemBytes},
      {"fused_softmax+swizzle", MmaConfig<kHeadDim, 2, true, 0>::kSmemBytes},
      {"pipe3", MmaConfig<kHeadDim, 3, false, 0>::kSmemBytes},
      {"pipe3+swizzle", MmaConfig<kHeadDim, 3, true, 0>::kSmemBytes},
      {"warp_spec", MmaConfig<kHeadDim, 2, false, 1>::kSmemBytes},
      {"warp_spec+swizzle", MmaConfig<kHeadDim, 2, true, 1>::kSmemBytes},
      {"warp_spec+2producers", MmaConfig<kHeadDim, 2, false, 2>::kSmemBytes},
      {"warp_spec+2producers+swizzle", MmaConfig<kHeadDim, 2, true, 2>::kSmemBytes},
      // The largest of the packed-row widths: 16 rows, 12 slots of codes (DecodeConfig::kSlots). On sm_90 both
      // variants run 16-row blocks with deeper rings, counted under the sm_90-only `decode_wgmma`.
      {"decode", DecodeConfig<kHeadDim, 1>::kSmemBytes},
      {"wgmma+predecode", WgmmaConfig<kHeadDim, false, true>::kSmemBytes},
      {"decode_wgmma", std::max(DecodeConfig<kHeadDim, 1, DecodeByWarps, true>::kSmemBytes,
                                decode_warpgroup_bytes<kHeadDim>())},
  });
}

// The variants built for head dims 64 and 128 only.
template <int kHeadDim>
void print_narrow_variant_sizes() {
  print_sizes(kHeadDim, {
      {"cp_async", ScalarSmem<kHeadDim, 2>::kBytes},
      {"wmma", WmmaConfig<kHeadDim>::kSmemBytes},
      {"fp8_mma", Fp8Config<kHeadDim, 4, 2>::kSmemBytes},
      {"fp8_mma+fp8_pv", Fp8Config<kHeadDim, 4, 2, true>::kSmemBytes},
      {"fp8_mma_m32", Fp8Config<kHeadDim, 2, 2>::kSmemBytes},
      {"fp8_mma_m16", Fp8Config<kHeadDim, 1, 2>::kSmemBytes},
      {"fp8_split", Fp8SplitConfig<kHeadDim, 2, 4>::kSmemBytes},
      {"wgmma", WgmmaConfig<kHeadDim, false>::kSmemBytes},
      {"wgmma_m192", WgmmaConfig<kHeadDim, false, false, kHeadDim == 64 ? 3 : 2>::kSmemBytes},
      {"wgmma_fp8", WgmmaConfig<kHeadDim, true>::kSmemBytes},
      {"wgmma_fp8_m64", WgmmaConfig<kHeadDim, true, false, 1>::kSmemBytes},
      {"wgmma_fp8_m64+fp8_pv", WgmmaConfig<kHeadDim, true, false, 1, true>::kSmemBytes},
      {"wgmma_fp8_m192+fp8_pv", WgmmaConfig<kHeadDim, true, false, 3, true>::kSmemBytes},
      {"wgmma_fp8+fp8_pv", WgmmaConfig<kHeadDim, true, false, 2, true>::kSmemBytes},
  });
}

}  // namespace

int main() {
  print_wide_variant_sizes<64>();
  print_narrow_variant_sizes<64>();
  print_wide_variant_sizes<128>();
  print_narrow_variant_sizes<128>();
  print_wide_variant_sizes<kWideHeadDim>();
  return 0;
}
