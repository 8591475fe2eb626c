// The variant table: every built name[+toggle...] with its launcher, and the choices behind variant="auto" and
// variant="fast".
#include <algorithm>
#include <cstring>
#include <string>

#include "../common/attention_common.cuh"
#include "../decode/decode_plan.h"
#include "../hopper/kv_to_half.h"
#include "../hopper/transpose_values.h"
#include "launch.h"
#include "variant_launchers.h"

namespace sdpa {
namespace {

using WorkspaceBytes = int64_t (*)(const AttentionParams&);

struct VariantEntry {
  const char* name;  // base name, then toggles in sorted order, joined by '+'
  AttentionLauncher launch;
  bool needs_aligned_rows;  // 16-byte loads (cp.async or vector loads) of q, k and v rows
  int min_sm;               // FP8 mma.sync needs sm_89
  int max_sm;               // 0: any newer GPU; wgmma is built for sm_90a, which runs on sm_90 only
  bool tma;                 // loads through TMA descriptors, which cannot step a dimension with stride 0
  int max_head_dim;         // 128, or kWideHeadDim where its launcher builds that too (launch_variant)
  WorkspaceBytes workspace = nullptr;  // scratch it needs (copies of K and V or V^T, partial rows of key splits)
  bool decode = false;                 // reads seqlens_k and quantizes a q of values itself (Sq <= 16)
};

constexpr VariantEntry kVariants[] = {
    {"scalar", &launch_scalar, false, 80, 0, false, kWideHeadDim},
    {"cp_async", &launch_cp_async, true, 80, 0, false, 128},
    {"wmma", &launch_wmma, false, 80, 0, false, 128},
    {"fused_softmax", &launch_fused_softmax, true, 80, 0, false, kWideHeadDim},
    {"fused_softmax+swizzle", &launch_fused_softmax_swizzle, true, 80, 0, false, kWideHeadDim},
    {"pipe3", &launch_pipe3, true, 80, 0, false, kWideHeadDim},
    {"pipe3+swizzle", &launch_pipe3_swizzle, true, 80, 0, false, kWideHeadDim},
    {"warp_spec", &launch_warp_spec, true, 80, 0, false, kWideHeadDim},
    {"warp_spec+swizzle", &launch_warp_spec_swizzle, true, 80, 0, false, kWideHeadDim},
    {"warp_spec+2producers", &launch_warp_spec_2producers, true, 80, 0, false, kWideHeadDim},
    {"warp_spec+2producers+swizzle", &launch_warp_spec_2producers_swizzle, true, 80, 0, false, kWideHeadDim},
    {"fp8_mma", &launch_fp8_mma, true, 89, 0, false, 128},
    {"fp8_mma+fp8_pv", &launch_fp8_mma_fp8_pv, true, 89, 0, false, 128},
    {"fp8_mma_m32", &launch_fp8_mma_m32, true, 89, 0, false, 128},
    {"fp8_mma_m16", &launch_fp8_mma_m16, true, 89, 0, false, 128},
    {"fp8_split", &launch_fp8_split, true, 89, 0, false, 128},
    {"wgmma", &launch_wgmma, true, 90, 90, true, 128},
    {"wgmma+predecode", &launch_wgmma_predecode, true, 90, 90, true, kWideHeadDim, &kv_decode_workspace_bytes},
    {"wgmma_m192", &launch_wgmma_m192, true, 90, 90, true, 128},
    {"wgmma_fp8", &launch_wgmma_fp8, true, 90, 90, true, 128},
    {"wgmma_fp8_m64", &launch_wgmma_fp8_m64, true, 90, 90, true, 128},
    {"wgmma_fp8_m64+fp8_pv", &launch_wgmma_fp8_m64_fp8_pv, true, 90, 90, true, 128},
    {"wgmma_fp8+fp8_pv", &launch_wgmma_fp8_fp8_pv, true, 90, 90, true, 128, &transposed_values_workspace_bytes},
    {"wgmma_fp8_m192+fp8_pv", &launch_wgmma_fp8_m192_fp8_pv, true, 90, 90, true, 128,
     &transposed_values_workspace_bytes},
    {"decode", &launch_decode, true, 80, 0, false, kWideHeadDim, &decode_workspace_bytes, true},
    {"decode_wgmma", &launch_decode_wgmma, true, 90, 90, false, kWideHeadDim, &decode_wgmma_workspace_bytes, true},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);

bool rows_aligned(const uint8_t* base, int64_t batch_stride, int64_t head_stride, int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && batch_stride % 16 == 0 && head_stride % 16 == 0 &&
         row_stride % 16 == 0;
}

// A broadcast (expanded) dimension has stride 0; a dimension of size 1 is never stepped over.
bool strides_steppable(int batch, int heads, int seqlen, int64_t batch_stride, int64_t head_stride,
                       int64_t row_stride) {
  return (batch == 1 || batch_stride > 0) && (heads == 1 || head_stride > 0) && (seqlen == 1 || row_stride > 0);
}

// Fastest full-tier variant by head dim and key length, from `python -m sdpa_ext.bench --preset sweep [--causal]`
// (1x16xSxD, fp16 inputs, S = 512 ... 16384) plus 4x16x2048xD, on an H200, 2026-11-21, commit 5542243
// (benchmarks/results/history/h200-2026-11-21-softmax.md); applied to every arch until other GPUs are measured.
//   D = 64:  warp_spec+2producers+swizzle wins at every length, causal or not, by 10-25% (S = 8192: 1137 us
//            against 1365 us for fused_softmax+swizzle; the mission shape 1x8x512x64: 9.5 against 13.1 us).
//   D = 128: warp_spec+2producers+swizzle wins at the ends (S = 512: 21.0 vs 23.8 us; S = 8192: 2695 vs
//            2816 us); from 1024 to 4096 keys fused_softmax+swizzle is best or within 4.2% (1024: 53.5 vs 65.6 us
//            for warp_spec). fp8_mma is never more than 2.9% ahead (4x16x2048x128: 722.8 vs 743.6 us), so auto
//            keeps to the variants that also run on sm_80.
// On sm_90 the full-tier `wgmma` takes over from 1024 keys (H200, 2026-11-21, 4x16x2048xD and 1x16x8192x128,
// causal or not: 228.2 against 306.9 us at D = 64, 416.8 against 823.3 us and 1441.0 against 2756.5 us at
// D = 128); at the mission shape 1x8x512x64 its 32 blocks of 128 rows leave most of the GPU idle.
// With up to 128 blocks of 64 rows (fewer than the H200's 132 SMs) `fp8_split` (sm_89+) keeps more warps busy:
// 1x8x512x64 8.4 against 9.3 us for warp_spec+2producers+swizzle, 1x8x512x128 14.8 against 16.0 us; at
// 2x8x1024x64 (256 blocks) it loses, 36.7 against 20.5 us (H200, 2026-11-21).
// At D = 128 `wgmma+predecode` takes over where the query rows per kv head reach 2048 (causal: below): it
// saves per query block (207.2 against 245.2 us for the attention kernel at 4x16x2048x128) and costs per key
// (decoding K and V: 28.8 us there as a pass over every head). The pass decodes only the kv heads of the
// first wave and the grid the others (kv_decode_ahead.cuh): the pass takes 5.9 us and the attention kernel 210.1
// there. Graph us against `wgmma`, H200, 2026-11-21, same run: non-causal 1x16xSx128 S = 1024 21.7 / 18.5, 2048
// 58.7 / 62.1, 4096 193.9 / 240.0; 2x16x1024x128 38.1 / 35.5, 4x16x1024x128 69.1 / 70.1, 2x16x2048x128 110.2 /
// 126.0, 1x32x2048x128 110.7 / 123.1, 4x16x2048x128 212.9 / 255.8; causal (a pass over every head) S = 1024
// 21.8 / 18.9, 2048 42.4 / 38.1, 4096 124.0 / 131.9, 2x16x2048x128 82.2 / 75.2, 4x16x2048x128 170.0 / 147.3. At
// D = 64 it loses everywhere (4x16x2048x64 175.2 / 168.6, 1x16x8192x64 610.2 / 571.8, causal 118.7 / 103.4 and
// 329.5 / 301.5): there the attention kernel alone gained 2 us without the decode.
// Causal grids now decode in the grid too, a group of heads ahead (plan_kv_decode): graph us against
// `wgmma`, H200, 2026-11-22, same run (the pass over every head in brackets): 4x16x2048x128 138.4 / 145.3 (170.4),
// 1x16x4096x128 115.0 / 121.9 (122.9), 1x16x8192x128 404.9 / 453.4 (444.9), 2x16x2048x128 73.6 / 72.9 (80.3),
// 4x16x1024x128 53.5 / 47.9 (59.4). The pass still takes the first groups' heads (16 of 32 at 2x16x2048x128), so a
// causal grid needs 4096 rows per kv head, or 2048 with 64 kv heads.
// At D = 64 `wgmma_m192` (192-row blocks, three consumer groups, the last wave split) is ~15% faster per row in
// the loop, but each block's fixed work grows with its rows (a fit over grids of whole waves on an H200: 1.41 us
// per 128-key round and 5.3-5.6 us per block, against 1.10 and 3.7 us for `wgmma`), so it pays from two waves of
// 192-row blocks (on 132 SMs, 264 blocks). Causal, each of its groups stops after the key tiles of its own rows, so
// that the diagonal costs it no more tiles than `wgmma`'s 128-row blocks. Graph us, `wgmma` / `wgmma_m192`, H200,
// 2026-11-22, one run of interleaved rounds: non-causal 1x16x1024x64 (96 blocks of 192 rows) 13.4 / 17.1,
// 2x16x1024x64 (192) 25.3 / 31.7, 1x16x2048x64 (176) 42.4 / 42.4, 1x8x4096x64 (176) 76.5 / 75.4, 2x16x2048x64
// (352) 83.0 / 79.9, 1x16x4096x64 (352) 150.7 / 144.7, 4x16x1024x64 (384) 49.2 / 47.3, 8x16x1024x64 (768)
// 98.4 / 94.7, 4x16x2048x64 (704) 165.9 / 148.5; causal 1x16x1024x64 13.5 / 16.6, 2x16x1024x64 18.4 / 20.0,
// 1x8x2048x64 (88) 22.1 / 26.5, 1x16x2048x64 26.7 / 27.1, 1x8x4096x64 43.0 / 49.7, 2x16x2048x64 51.3 / 49.0,
// 1x16x4096x64 84.4 / 80.1, 4x16x1024x64 34.4 / 32.9, 8x16x1024x64 68.0 / 66.1, 4x16x2048x64 102.1 / 94.2,
// 1x16x8192x64 (688) 300.8 / 263.4.
// Short heads also need their rows to fill the 192-row tiles about as well as 128-row ones: at 197 rows (two
// tiles of either, 384 rows against 256) `wgmma` wins, 35.4 against 40.6 us at 32x12x197x64; at 577 rows (768
// against 640) `wgmma_m192` does, 172.9 against 177.8 at 32x16x577x64 (H100, 2026-11-24).
bool rows_fill_192_row_tiles(const AttentionParams& p) {
  return 4 * (query_tiles(p, 192) * 192) <= 5 * (query_tiles(p, 128) * 128);
}

bool three_groups_pay(const AttentionParams& p, int sms) {
  const int64_t waves = attention_blocks(p, 192) / std::max(sms, 1);
  return p.head_dim == 64 && waves >= 2 && rows_fill_192_row_tiles(p);
}

// `fp8_split` beats the Hopper kernels at every key length while its 32-row blocks fit in one wave: their 128-row
// blocks leave most SMs idle there. Graph us, `wgmma` (what auto took) / `fp8_split`, H200, 2026-11-21, commit
// 2d7671b: 1x8x512xSx64 (128 blocks) S = 1024 13.3 / 7.0, 2048 22.3 / 12.0, 4096 38.9 / 21.6; causal 1x8x512x1024x64
// 8.8 / 4.6; 1x8x512xSx128 S = 1024 17.3 / 12.1, 2048 29.5 / 21.0, 8192 102.8 / 75.2; 1x8x256x8192x64 (64 blocks)
// 72.8 / 41.1; 1x4x1024x4096x128 53.9 / 39.1; 4x8x128x2048x64 22.3 / 12.0. With two waves it loses: 1x16x512xSx64
// (256 blocks) S = 1024 13.4 / 13.6, 2048 22.4 / 23.4, 4096 39.8 / 43.4; 1x8x1024x8192x64 73.0 / 81.7;
// 1x16x512x2048x128 29.6 / 41.6.
bool split_fits_one_wave(const AttentionParams& p, int sms) { return attention_blocks(p, 32) <= sms; }

// Below 1024 keys the Hopper kernels still win once their 128-row blocks fill the GPU, by 1.3-3x over what auto
// took before (the mma.sync kernels). Graph us, auto then / `wgmma` / `wgmma_m192`, H100, 2026-11-24, one run of
// interleaved rounds: 32x16x577x64 267.1 / 177.8 / 172.9, causal 32x12x577x64 134.0 / 103.8 / 106.5,
// 32x12x197x64 42.2 / 35.4 / 40.6, 32x16x257x128 212.5 / 105.3 / 105.2, 8x16x512x64 45.9 / 33.0 / 32.6 (causal
// 35.6 / 26.2 / 26.4), 4x16x768x128 97.1 / 42.1 / 42.0 (causal 71.4 / 31.7 / 31.7), 16x16x512x128 254.9 / 84.8 /
// 84.5 (causal 171.3 / 72.1 / 71.6): the grids of vision transformers and of prefill batches of short prompts.
bool hopper_blocks_fill_gpu(const AttentionParams& p) { return attention_blocks(p, 128) >= multiprocessor_count(); }

// Grids of many kv heads pay from 577 rows each, causal or not: graph us, `wgmma+predecode` / `wgmma`, H200,
// 2026-11-28, 3 interleaved rounds: 16x16x1024x128 (256 kv heads) 239.8 / 267.8, causal 178.0 / 194.9;
// 32x16x577x128 (512) 224.5 / 241.2, causal 181.6 / 184.6; with fewer heads not: 4x16x1024x128 (64) 66.6 / 67.5,
// causal 50.5 / 45.8; 8x16x512x128 (128) 45.8 / 41.5, causal 39.7 / 33.7.
bool predecode_pays(const AttentionParams& p) {
  const int64_t rows_per_kv_head = static_cast<int64_t>(p.seqlen_q) * (p.heads_q / p.heads_kv);
  const int64_t kv_heads = static_cast<int64_t>(p.batch) * p.heads_kv;
  const bool many_heads = kv_heads >= 256 && rows_per_kv_head >= 577;
  const bool causal_pays = rows_per_kv_head >= 4096 || (rows_per_kv_head >= 2048 && kv_heads >= 64);
  return p.head_dim == 128 && (many_heads || (p.is_causal ? causal_pays : rows_per_kv_head >= 2048));
}

// `decode` takes every call with per-sequence key lengths (no other kernel reads them) and every call of up to 16
// query rows per head, where the other kernels' 64- or 128-row query tiles stay mostly empty and each reads K and V
// once per query head; decode packs the query heads of a kv head into one tile.
bool decode_pays(const AttentionParams& p) { return p.seqlens_k != nullptr || p.seqlen_q <= 16; }

// On sm_90 the 64-row decode blocks (more than 32 packed rows per kv head, where the K and V codes outgrow L2 or
// the rows 64) take `decode_wgmma`, which converts each code once per block instead of once per warp. Graph us,
// decode / decode_wgmma, H200, 2026-11-24, commit 4f6969f, one run: 8x32x8x16x32768x128 321.0 / 222.4 (one query:
// 140.4), 8x32x4x8x32768x128 171.2 / 119.9, 8x32x8x16x4096x128 66.4 / 50.6, 16x32x8x16x8192x64 113.4 / 83.1,
// 1x32x8x16x131072x128 163.0 / 113.5, 32x32x8x16x4096x128 225.3 / 155.6; H100, 8x32x8x16x32768x128 329.2 / 238.8
// (one query 186.9, 571d560).
const char* decode_variant_name(const AttentionParams& p, int sm) {
  return sm == 90 && decode_row_warps(p) == 4 ? "decode_wgmma" : "decode";
}

// Head dim 256 has the scalar, mma.sync and decode families and `wgmma+predecode` (kWideHeadDim). On sm_90 the
// Hopper kernel takes it: graph us, wgmma+predecode / pipe3+swizzle / cuDNN, H100, 2026-11-27, one run of 3 rounds:
// 4x16x2048x256 438.0 / 1291.4 / 407.7, causal 279.9 / 739.4 / 259.0; 1x16x8192x256 1494.5 / 4893.9 / 1657.1,
// causal 773.9 / 2926.6 / 892.1; 2x8x1024x256 38.3 / 83.9 / 33.8; 1x8x512x256 20.7 / 32.8 / 18.0; 1x4x128x256
// 10.0 / 10.7 / 9.0. Elsewhere, of the mma.sync kernels (four consumer warps a block at 253-255 registers, so by
// registers two blocks per SM, one with producer warps) pipe3+swizzle is the fastest or within 1.5% of it: graph us,
// pipe3+swizzle / fused_softmax+swizzle / warp_spec+2producers+swizzle / cuDNN, H100, 2026-11-26, one run of 3
// rounds: 4x16x2048x256 1219 / 1227 / 1754 / 409, causal 708 / 710 / 984 / 260; 1x16x8192x256 4806 / 4822 / 6914 /
// 1541, causal 2688 / 2675 / 3658 / 937; causal 1x8x512x256 31.5 / 32.4 / 31.5 / 18.5.
const char* wide_head_variant_name(const AttentionParams& p, int sm) {
  if (decode_pays(p)) return "decode";
  return sm == 90 ? "wgmma+predecode" : "pipe3+swizzle";
}

// A q whose rows the kernel quantizes (q_row_groups) takes a Hopper kernel on sm_90, the only ones that do besides
// decode: the drop-in asks for it from 4 MB of q, where their blocks fill the GPU but for short keys and few heads.
const char* auto_variant_name(const AttentionParams& p, int sm) {
  if (p.head_dim == kWideHeadDim) return wide_head_variant_name(p, sm);
  if (decode_pays(p)) return decode_variant_name(p, sm);
  if (sm == 90 && (p.q_row_groups || p.seqlen_k >= 1024 || hopper_blocks_fill_gpu(p))) {
    const int sms = multiprocessor_count();  // 0 when the runtime cannot say
    if (p.q_row_groups || !split_fits_one_wave(p, sms)) {
      return predecode_pays(p) ? "wgmma+predecode" : three_groups_pay(p, sms) ? "wgmma_m192" : "wgmma";
    }
  }
  if (sm >= 89 && attention_blocks(p, 64) <= 128) return "fp8_split";
  const bool warp_specialized = p.head_dim == 64 || p.seqlen_k <= 512 || p.seqlen_k >= 8192;
  return warp_specialized ? "warp_spec+2producers+swizzle" : "fused_softmax+swizzle";
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

bool attention_variant_runs_on(int variant, int sm) {
  const VariantEntry& v = kVariants[variant];
  return sm >= v.min_sm && (v.max_sm == 0 || sm <= v.max_sm);
}

std::string attention_variant_archs(int variant) {
  const VariantEntry& v = kVariants[variant];
  if (v.max_sm == v.min_sm) return "sm_" + std::to_string(v.min_sm);
  return "sm_" + std::to_string(v.min_sm) + (v.max_sm == 0 ? " or newer" : " to sm_" + std::to_string(v.max_sm));
}

bool attention_variant_uses_tma(int variant) { return kVariants[variant].tma; }

int64_t attention_workspace_bytes(int variant, const AttentionParams& p) {
  const WorkspaceBytes bytes = kVariants[variant].workspace;
  return bytes != nullptr ? bytes(p) : 0;
}

bool attention_variant_takes_seqlens(int variant) { return kVariants[variant].decode; }

bool attention_variant_takes_head_dim(int variant, int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == kVariants[variant].max_head_dim;
}

// The decode kernel stages the q rows of a block and takes the amax of its heads itself: heads of up to 16 rows,
// which are also one group of 16 rows (q_row_groups). The Hopper kernels (wgmma*) quantize each warp's 16 rows
// themselves at head dims up to 128, in instantiations of their own (WgmmaConfig::kQuantizesQRows); the others take
// q per head only, and keep their code as it was (FragmentRows' kRowGroups).
bool attention_variant_quantizes_q(int variant, const AttentionParams& p) {
  if (kVariants[variant].decode) return p.seqlen_q <= 16;
  return p.q_row_groups && p.head_dim <= 128 && std::strncmp(kVariants[variant].name, "wgmma", 5) == 0;
}

bool attention_variant_reads_q(int variant, const AttentionParams& p) {
  // A q of values reaches a kernel as decode's, which reads it element by element, or as 16-bit values in rows of
  // 16-byte loads (q_row_groups: the Hopper kernels).
  const int64_t q_bytes = p.q_type == QueryType::kCodes ? 1 : p.q_row_groups && !kVariants[variant].decode ? 2 : 0;
  const bool q_aligned = q_bytes == 0 || rows_aligned(p.q, q_bytes * p.q_batch_stride, q_bytes * p.q_head_stride,
                                                     q_bytes * p.q_row_stride);
  return (!kVariants[variant].needs_aligned_rows || q_aligned) &&
         (!kVariants[variant].tma ||
          strides_steppable(p.batch, p.heads_q, p.seqlen_q, p.q_batch_stride, p.q_head_stride, p.q_row_stride));
}

bool attention_variant_aligned(int variant, const AttentionParams& p) {
  const bool aligned = !kVariants[variant].needs_aligned_rows ||
                       (rows_aligned(p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride) &&
                        rows_aligned(p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride));
  return attention_variant_reads_q(variant, p) && aligned &&
         (!kVariants[variant].tma ||
          (strides_steppable(p.batch, p.heads_kv, p.seqlen_k, p.k_batch_stride, p.k_head_stride, p.k_row_stride) &&
           strides_steppable(p.batch, p.heads_kv, p.seqlen_k, p.v_batch_stride, p.v_head_stride, p.v_row_stride)));
}

// A choice that cannot read the inputs gives way to the choice of a GPU without TMA kernels (the Hopper kernels'
// descriptors cannot step a stride-0 dimension; the others can), then to `scalar`, which reads any rows.
int auto_attention_variant(const AttentionParams& p, int sm) {
  auto readable = [&](int variant) {
    return attention_variant_aligned(variant, p) && attention_variant_runs_on(variant, sm);
  };
  const int fastest = find_attention_variant(auto_variant_name(p, sm));
  if (readable(fastest)) return fastest;
  const int without_tma = find_attention_variant(auto_variant_name(p, std::min(sm, 89)));
  return readable(without_tma) ? without_tma : find_attention_variant("scalar");
}

// The fast tier swaps in `wgmma_fp8+fp8_pv` (both products on the e4m3 tensor cores) wherever auto takes `wgmma`
// or `wgmma+predecode` (same archs and input requirements). Since its V transpose moved to ldmatrix/stmatrix it is
// the fastest there: graph us, fp8_pv / wgmma_fp8, H200, 2026-11-27, two alternating runs: 4x16x2048x128 179.3,
// 183.6 / 200.1, 198.1; causal 109.8, 110.7 / 124.9, 125.0; 1x16x8192x128 644.5, 654.8 / 722.4, 730.0. (Before:
// `wgmma_fp8` against `wgmma+predecode`, H200, 2026-11-21: 4x16x2048x128 283.9 against 416.8 us, 1x16x8192x128
// 917.5 against 1441.0.) Its P in E4M3 keeps 3 mantissa bits (output SQNR about 31.5 dB against float64 on random
// inputs where `wgmma_fp8` keeps 45-73), which the fast tier's 30 dB gate admits over the test grid.
// Up to 1024 keys at D = 64 it takes `wgmma_fp8_m64` wherever auto takes a Hopper kernel and the 192-row blocks (below)
// do not pay: there each block is mostly its start and end, which its two blocks per SM overlap. Graph us,
// wgmma_fp8_m64 / wgmma_fp8 / wgmma_m192 / cuDNN, H100, 2026-11-26, two runs of 3 interleaved rounds: 32x12x197x64 32.8
// / 34.2 / 40.9 / 26.3, 32x16x257x64 62.1 / 78.5 / 69.1 / 61.5, 8x16x512x64 30.0 / 31.3 / 32.6 / 27.2, 32x16x577x64
// 157.3 / 172.3 / 174.3 / 147.9, 4x16x768x64 28.7 / 29.9 / 28.4 / 27.2, 16x16x1024x64 168.4 / 186.4 / 175.4 / 158.9;
// causal 8x16x512x64 23.9 / 24.5 / 26.3 / 24.1, 32x12x577x64 92.2 / 96.6 / 106.4 / 78.4, 4x16x768x64 22.0 / 22.2 / 21.9
// / 24.9. From 2048 keys `wgmma_m192` is ahead: 4x16x2048x64 154.2 / 166.7 / 147.7 / 151.2.
// At D = 128 its tiles hold 64 keys (wgmma_fp8's 128), which pays below 512 keys where the last 128-key tile would be
// partly empty. Graph us, wgmma_fp8_m64 / wgmma_fp8 / cuDNN, same GPU and method: 32x16x197x128 57.5 / 59.7 / 45.2,
// 32x16x257x128 77.0 / 97.6 / 82.6, 16x16x320x128 41.1 / 52.7 / 45.8, 16x16x384x128 52.9 / 50.7 / 45.5,
// 16x16x385x128 66.8 / 77.4 / 70.8, 16x16x448x128 67.5 / 78.7 / 72.1, 8x16x512x128 43.8 / 39.9 / 37.8,
// 16x16x1024x128 277.1 / 226.0 / 235.9; causal 8x16x512x128 32.4 / 33.6 / 33.7, 4x16x1024x128 45.3 / 42.1 / 50.7.
// On those short heads at D = 128 it takes `wgmma_fp8_m64+fp8_pv`, both products in E4M3: graph us, wgmma_fp8_m64 /
// +fp8_pv / cuDNN, H100, 2026-11-27, 3 interleaved rounds: 32x16x257x128 77.6 / 69.2 / 82.5, 16x16x385x128
// 68.3 / 59.2 / 71.1, 16x16x320x128 41.6 / 37.5 / 46.1. At D = 64 not: 32x12x197x64 33.2 / 33.2 / 27.3,
// 32x16x577x64 154.9 / 160.1 / 149.5, 8x16x512x64 29.4 / 28.5 / 26.9, 16x16x1024x64 171.8 / 161.6 / 161.2.
// At D = 64 `wgmma_fp8_m192+fp8_pv` (wgmma_fp8+fp8_pv in 192-row blocks, three consumer groups) is 12-17% faster
// than every other fast kernel wherever its blocks fill the GPU twice, from 577 keys, or once from 2048 keys (its
// last wave splits into 64-row units); with one to two waves of 1024 keys, and below 577 keys unmeasured, the
// 64-row blocks stay. Graph us, wgmma_fp8_m64 / wgmma_fp8+fp8_pv / wgmma_m192 / wgmma_fp8_m192+fp8_pv / cuDNN, H100,
// 2026-11-28, 3 interleaved rounds (blocks of 192 rows in brackets, 132 SMs): 4x16x2048x64 (704) 153.9 / 154.2 /
// 148.1 / 128.2 / 151.9, causal 91.3 / 91.5 / 92.6 / 77.6 / 100.3; 1x16x8192x64 574.3 / 540.1 / 505.1 / 442.5 /
// 566.4, causal 292.9 / 280.8 / 257.4 / 229.1 / 338.4; 2x16x2048x64 (352) 79.6 / 79.3 / 80.6 / 70.4 / 78.5, causal
// 47.3 / 47.1 / 49.1 / 41.8 / 59.1; 1x16x2048x64 (176) 40.7 / 42.5 / 42.1 / 36.8 / 42.1, causal 25.4 / 25.1 / 26.3
// / 24.7 / 38.5; 16x16x1024x64 (1536) 169.3 / 176.8 / 176.9 / 149.2 / 160.0, causal 120.5 / 120.8 / 132.8 / 111.7 /
// 106.8; 32x16x577x64 (2048) 152.9 / 168.6 / 171.6 / 153.2 / 148.7, causal 123.5 / 132.8 / 141.2 / 122.7 / 100.6;
// 2x16x1024x64 (192) 23.4 / 23.9 / 32.0 / 27.1 / 24.8, causal 16.6 / 16.3 / 19.1 / 16.2 / 23.0. On an H200 the
// same: 4x16x2048x64 127.3 against 146.1 for wgmma_m192, 1x16x8192x64 441.4 against 503.1 (2026-11-28).
// At D = 128 (64-key tiles, V^T from the pass where a kv head has many blocks) it is the fastest from 512 keys on
// the same grids: graph us, wgmma_fp8_m64+fp8_pv / wgmma_fp8+fp8_pv / wgmma_fp8_m192+fp8_pv / cuDNN, H200,
// 2026-11-28, 3 interleaved rounds: 4x16x2048x128 200.3 / 181.0 / 166.3 / 220.6, causal 118.6 / 112.9 / 98.0 /
// 147.7; 1x16x8192x128 740.6 / 616.0 / 566.8 / 847.1, causal 391.8 / 343.6 / 303.5 / 502.2; 2x16x2048x128 99.7 /
// 95.9 / 88.0 / 112.2, causal 58.3 / 57.7 / 51.1 / 84.8; 1x16x4096x128 193.9 / 170.8 / 163.5 / 214.7, causal
// 104.3 / 96.7 / 90.0 / 154.0; 16x16x1024x128 228.1 / 211.0 / 189.5 / 234.1, causal 173.8 / 161.0 / 139.8 /
// 160.6; 8x16x512x128 35.1 / 36.1 / 31.8 / 36.2, causal 26.8 / 29.3 / 24.8 / 32.5; 1x16x2048x128 (1.3 waves)
// 50.9 / 48.1 / 48.2 / 58.7, causal 29.2 / 28.7 / 28.5 / 53.0.
// Below 2048 keys it takes them where their grid runs in fewer waves than the 128-row one (a partial wave counted
// whole), or causal, in two waves or more: a causal grid's blocks differ in work, and its partial last wave of short
// blocks costs less than a whole one. Graph us, the same four kernels and cuDNN, H200, 2026-11-28 (8c1ca4c), 3
// interleaved rounds, blocks of 192 / 128 rows in brackets; fewer waves: 4x16x768x128 (256 / 384) 34.3 / 33.9 / 28.4
// / 37.7, causal 24.1 / 25.2 / 20.5 / 34.3; 2x16x1536x128 (256 / 384) 58.3 / 56.1 / 46.6 / 65.6, causal 35.8 / 36.5
// / 29.5 / 54.5; 1x32x768x128 (128 / 192) 22.2 / 22.6 / 14.8 / 26.5, causal 13.3 / 14.4 / 14.1 / 23.9; 2x16x577x128
// (128 / 160) 19.7 / 21.9 / 13.2 / 25.2, causal 10.5 / 13.0 / 11.6 / 19.7; 1x16x1536x128 (128 / 192) 37.1 / 36.1 /
// 24.2 / 44.2, causal 20.0 / 19.4 / 23.1 / 36.3; at D = 64 (wgmma_fp8_m64 first) 4x16x768x64 28.3 / 28.8 / 24.0 /
// 27.8, causal 20.9 / 21.0 / 17.5 / 25.1; 1x32x768x64 18.7 / 19.6 / 13.1 / 20.0, causal 12.3 / 12.1 / 12.7 / 17.9;
// 2x16x1536x64 47.3 / 47.8 / 39.5 / 47.3, causal 29.9 / 30.5 / 25.1 / 38.5. Equal waves: 3x16x1024x128 (288 / 384)
// 42.0 / 40.9 / 43.3 / 46.9, causal 27.9 / 28.9 / 27.7 / 41.1; 6x12x577x128 (288 / 360) 30.1 / 32.7 / 30.8 / 35.1,
// causal 21.2 / 23.6 / 22.8 / 29.8; 3x16x1024x64 34.8 / 35.2 / 33.8 / 34.9, causal 24.1 / 24.2 / 23.3 / 29.5;
// 2x16x1024x128 (192 / 256) 28.7 / 28.0 / 33.2 / 33.4, 1x16x1024x128 (96 / 128) 15.4 / 15.2 / 17.4 / 19.6
// (2026-11-28, dca4ecb).
namespace {
bool one_group_pays(const AttentionParams& p) {
  if (p.head_dim == 64) return p.seqlen_k <= 1024;
  return p.seqlen_k < 512 && p.seqlen_k % 128 != 0;
}

// Waves of a grid of block_m-row blocks on `sms` SMs, a partial last wave counted whole.
int64_t grid_waves(const AttentionParams& p, int block_m, int sms) {
  return (attention_blocks(p, block_m) + sms - 1) / sms;
}

bool fp8_three_groups_pay(const AttentionParams& p, int sms) {
  sms = std::max(sms, 1);
  const bool waves_pay = p.is_causal ? grid_waves(p, 192, sms) >= 2 : grid_waves(p, 192, sms) < grid_waves(p, 128, sms);
  const bool long_heads_fill = p.seqlen_k >= 2048 && attention_blocks(p, 192) >= sms;
  return p.seqlen_k >= (p.head_dim == 64 ? 577 : 512) && rows_fill_192_row_tiles(p) && (waves_pay || long_heads_fill);
}
}  // namespace

int fast_attention_variant(const AttentionParams& p, int sm) {
  const int chosen = auto_attention_variant(p, sm);
  const bool hopper = chosen == find_attention_variant("wgmma") ||
                      chosen == find_attention_variant("wgmma+predecode") ||
                      chosen == find_attention_variant("wgmma_m192");
  int fast = chosen;
  if (hopper && fp8_three_groups_pay(p, multiprocessor_count())) {
    fast = find_attention_variant("wgmma_fp8_m192+fp8_pv");
  } else if (hopper && one_group_pays(p)) {
    fast = find_attention_variant(p.head_dim == 128 ? "wgmma_fp8_m64+fp8_pv" : "wgmma_fp8_m64");
  } else if (hopper) {
    fast = find_attention_variant("wgmma_fp8+fp8_pv");
  }
  // The fast kernels are built for D = 64 and 128; at D = 256 auto's choice stays.
  return attention_variant_takes_head_dim(fast, p.head_dim) ? fast : chosen;
}

cudaError_t launch_attention(const AttentionParams& params, int variant, cudaStream_t stream) {
  if (variant < 0 || variant >= kVariantCount) return cudaErrorInvalidValue;
  return kVariants[variant].launch(params, stream);
}

}  // namespace sdpa
