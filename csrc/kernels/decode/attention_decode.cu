// The `decode` variant: its plan (decode_plan.h), the attention kernel per packed-row width and head dim, and the
// combine kernel when the keys are split across blocks.
#include <algorithm>

#include "../dispatch/variant_launch.cuh"
#include "../dispatch/variant_launchers.h"
#include "attention_decode.cuh"

namespace sdpa {
namespace {

// Whether the current device runs the 16-row blocks with deeper rings (DecodeConfig's kDeepRings): sm_90. A plain
// attribute query, as multiprocessor_count makes on the same launch path.
bool deep_rings() { return current_device_attribute(cudaDevAttrComputeCapabilityMajor) == 9; }

// A key split takes at least this many rounds of its block (round_keys each): fewer would spend more on the block's
// start, its merge and the combine than the split saves. The deep-ring blocks take one: their round is already 8
// tiles (256 keys at D = 128), and four of them kept a short cache on a few SMs. H200, graph us, bf16 q, one or four
// rounds, 2 runs of 2 rounds each: 1x32x8x1x1024x128 6.6 / 9.1 (cuDNN on the bf16 cache 6.7), 1x32x8x1x2048x128
// 6.7 / 10.8 (7.4), 1x32x8x1x4096x128 8.4 / 11.0 (11.8), 1x32x8x1x4096x64 6.7 / 10.9 (7.8), 1x32x8x4x4096x128
// 9.0-9.3 / 11.9 (flash 26.1), 1x32x8x2x4096x128 8.5 / 11.2; 2x32x8x1x4096x128 11.6-11.7 / 11.9-12.1, the rows
// with more heads or keys the same. For the other blocks four stay: one was no better for 32-row blocks
// (1x32x8x8x4096x128 14.0 / 13.8) and mixed for the warpgroup's (16 queries: 23.1-23.5 / 23.5-23.6 at 2048 keys,
// 28.9 / 31.2 at 4096, 13.5 / 11.9 at 4096 and D = 64); sm_80 and sm_89 were not measured.
int min_rounds_per_split(int row_warps) { return row_warps == 1 && deep_rings() ? 1 : 4; }

// Whether the K and V codes a call reads (at the cache's capacity) fit the current device's L2.
bool codes_fit_l2(const AttentionParams& p) {
  const int64_t bytes = 2 * static_cast<int64_t>(p.batch) * p.heads_kv * p.seqlen_k * p.head_dim;
  const int l2_bytes = current_device_attribute(cudaDevAttrL2CacheSize);
  return l2_bytes > 0 && bytes <= l2_bytes;
}

// Keys a block takes per round: a tile for each of its key groups.
int round_keys(const AttentionParams& p, int row_warps) {
  const int key_groups = row_warps == 1 && deep_rings() ? DecodeConfig<64, 1, DecodeByWarps, true>::kSplits
                                                        : DecodeConfig<64, 1>::kSplits / row_warps;
  return key_groups * (kDecodeTileBytes / p.head_dim);
}

}  // namespace

// sm_90's 16-row blocks (8 warps, one block an SM) take up to 64 packed rows as several row tiles where the call's K
// and V codes fit L2: each row tile of a kv head reads its codes, L2 serving all but the first, and 4 row tiles of
// short rows keep more SMs busy than one 64-row block. H200, graph us, bf16 q, codes streamed from memory, 64-row
// warpgroup / four 16-row tiles (flash on the bf16 cache): 16 queries of 4 heads, B = 1, 1024 keys 19.1 / 8.5 (13.0),
// 2048 23.3 / 10.0 (16.7), 4096 30.0 / 13.0 (26.7), 8192 31.7 / 18.7, 16384 (34 MB of codes) 37.1 / 30.1;
// 2x32x8x16x2048x128 28.4 / 14.1, 4x32x8x16x4096x128 (34 MB) 43.0 / 27.6, 1x32x8x16x2048x64 13.0 / 8.2; 8 queries
// (32-row blocks / two 16-row tiles) 1x32x8x8x4096x128 13.8 / 10.6. Beyond L2 the re-reads come from memory:
// 8x32x8x16x32768x128 (537 MB) 209 / 369, 16x32x8x16x8192x64 (134 MB) 73 / 108 (8 queries at 537 MB: 189-195 /
// 186). sm_80 and sm_89, whose 16-row blocks are 4 warps, were not measured.
int decode_row_warps(const AttentionParams& p) {
  const int rows = decode_packed_rows(p);
  if (rows <= 16 || (rows <= 64 && p.head_dim != kWideHeadDim && deep_rings() && codes_fit_l2(p))) return 1;
  return rows <= 32 || p.head_dim == kWideHeadDim ? 2 : 4;
}

namespace {

DecodePlan current_plan(const AttentionParams& p, bool wgmma) {
  return plan_decode(p, multiprocessor_count(), decode_blocks_per_sm(p.head_dim, decode_row_warps(p), wgmma));
}

template <int kRowGroups, class Mma = DecodeByWarps, bool kDeepRings = false>
struct DecodeVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    using Cfg = DecodeConfig<kHeadDim, kRowGroups, Mma, kDeepRings>;
    const DecodePlan plan = current_plan(p, Cfg::kWgmma);
    const dim3 grid(Cfg::kPersistent ? std::min(plan.items, plan.slots) : plan.items);
    cudaError_t err = launch_overlapping(p.overlap_launch, decode_attention_kernel<Cfg, OutT>, grid, Cfg::kThreads,
                                         Cfg::kSmemBytes, stream, p, plan);
    if (err != cudaSuccess || plan.splits == 1) return err;
    return launch_overlapping(p.overlap_launch, decode_combine_kernel<kHeadDim, OutT>,
                              static_cast<unsigned>(plan.rows), 32 * kCombineWarps, 0, stream, p, plan);
  }
};

}  // namespace

template <int kHeadDim, int kRowGroups, class Mma = DecodeByWarps, bool kDeepRings = false>
int blocks_per_sm() {
  using Cfg = DecodeConfig<kHeadDim, kRowGroups, Mma, kDeepRings>;
  const auto kernel = decode_attention_kernel<Cfg, __half>;
  int blocks = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Cfg::kThreads, Cfg::kSmemBytes) != cudaSuccess) {
    return 0;
  }
  return blocks;
}

// A block shape's instantiations at one head dim share threads and shared memory; the head dims do not share
// registers (sm_90a, per thread: 128-151 at D = 64, 166-168 at D = 128, 248-254 at D = 256). Blocks of 128 threads
// at D = 256 fit two per SM where D = 128 fits three, and the plan's splits would leave a second wave of a third.
template <int kHeadDim>
int blocks_per_sm_of_shape(int shape) {
  if (shape == 0) {
    return deep_rings() ? blocks_per_sm<kHeadDim, 1, DecodeByWarps, true>() : blocks_per_sm<kHeadDim, 1>();
  }
  if constexpr (kHeadDim == kWideHeadDim) {
    return blocks_per_sm<kHeadDim, 2>();  // no 64-row blocks at D = 256 (decode_row_warps)
  } else {
    return shape == 1 ? blocks_per_sm<kHeadDim, 2>()
           : shape == 2 ? blocks_per_sm<kHeadDim, 4>()
                        : blocks_per_sm<kHeadDim, 4, DecodeByWgmma>();
  }
}

int decode_blocks_per_sm(int head_dim, int row_warps, bool wgmma) {
  // Queried once per device, head dim and block shape.
  static int cached[64][3][4] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  const int shape = row_warps == 1 ? 0 : row_warps == 2 ? 1 : wgmma ? 3 : 2;
  const int width = head_dim == 64 ? 0 : head_dim == 128 ? 1 : 2;
  int& blocks = cached[device][width][shape];
  if (blocks == 0) {
    blocks = width == 0   ? blocks_per_sm_of_shape<64>(shape)
             : width == 1 ? blocks_per_sm_of_shape<128>(shape)
                          : blocks_per_sm_of_shape<kWideHeadDim>(shape);
  }
  return blocks;
}

// Splits the keys of each (kv head, row tile) over as many blocks as fill the GPU's resident slots once (more
// waves add a tail; fewer leave SMs idle), but keeps min_rounds_per_split rounds per split.
DecodePlan plan_decode(const AttentionParams& p, int sms, int blocks_per_sm) {
  DecodePlan plan{};
  plan.row_warps = decode_row_warps(p);
  plan.row_tiles = (decode_packed_rows(p) + 16 * plan.row_warps - 1) / (16 * plan.row_warps);
  plan.rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int step = round_keys(p, plan.row_warps);
  const int64_t heads = static_cast<int64_t>(p.batch) * p.heads_kv * plan.row_tiles;
  const int64_t slots = std::max(1, sms) * static_cast<int64_t>(std::max(1, blocks_per_sm));
  const int64_t most = std::max<int64_t>(1, p.seqlen_k / (min_rounds_per_split(plan.row_warps) * step));
  const int64_t splits = std::clamp<int64_t>(slots / heads, 1, most);
  const int64_t keys = (p.seqlen_k + splits - 1) / splits;
  plan.keys_per_split = static_cast<int>((keys + step - 1) / step * step);
  plan.splits = (p.seqlen_k + plan.keys_per_split - 1) / plan.keys_per_split;
  plan.items = static_cast<int>(plan.splits * heads);  // splits > 1 only where heads * splits <= slots
  plan.slots = static_cast<int>(slots);
  return plan;
}

namespace {

int64_t workspace_bytes(const AttentionParams& p, bool wgmma) {
  const DecodePlan plan = current_plan(p, wgmma);
  return plan.splits == 1 ? 0 : plan.splits * plan.rows * (p.head_dim + 1) * static_cast<int64_t>(sizeof(float));
}

// Blocks of 16 or 32 rows multiply by warps in both variants; 64-row blocks by warps or by wgmma.
template <class WideMma>
cudaError_t launch_by_width(const AttentionParams& p, cudaStream_t stream) {
  switch (decode_row_warps(p)) {
    case 1:
      return deep_rings() ? launch_variant<DecodeVariant<1, DecodeByWarps, true>, kWideHeadDim>(p, stream)
                          : launch_variant<DecodeVariant<1>, kWideHeadDim>(p, stream);
    case 2:
      return launch_variant<DecodeVariant<2>, kWideHeadDim>(p, stream);
    default:
      return launch_variant<DecodeVariant<4, WideMma>>(p, stream);
  }
}

}  // namespace

int64_t decode_workspace_bytes(const AttentionParams& p) { return workspace_bytes(p, false); }
int64_t decode_wgmma_workspace_bytes(const AttentionParams& p) { return workspace_bytes(p, true); }

cudaError_t launch_decode(const AttentionParams& p, cudaStream_t stream) {
  return launch_by_width<DecodeByWarps>(p, stream);
}
// The warpgroup addresses its chunks with 32-bit offsets within a head (OwnedChunks); rows further apart than
// 2^24 bytes take the warps' kernel, which computes the same values.
cudaError_t launch_decode_wgmma(const AttentionParams& p, cudaStream_t stream) {
  constexpr int64_t kMaxStride = int64_t{1} << 24;
  if (p.k_row_stride >= kMaxStride || p.v_row_stride >= kMaxStride) return launch_decode(p, stream);
  return launch_by_width<DecodeByWgmma>(p, stream);
}

}  // namespace sdpa
