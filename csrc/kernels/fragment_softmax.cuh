// The online-softmax step of the mma.sync kernels, on accumulators in the m16n8 C layout: lane l holds rows
// g = l / 4 and g + 8, columns 2 (l % 4) and 2 (l % 4) + 1 of every 8-key n-tile.
#pragma once

#include "attention_common.cuh"
#include "ptx.cuh"

namespace sdpa {

// Scales a tile of raw scores to log2 units, masks keys past seqlen_k (and above the diagonal when causal),
// folds the tile into the running max/sum of the lane's two rows, rescales the O accumulators, and leaves
// P = exp2(S - max) in s. The row sums stay per lane until the epilogue reduces them over the quad.
template <int kNTiles, int kOTiles>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kNTiles][4], float (&o)[kOTiles][4],
                                                    RowSoftmax (&softmax)[2], const int (&row)[2], int key0,
                                                    float score_scale, const AttentionParams& p, int lane) {
  float offset[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = key0 + nt * 8 + 2 * (lane % 4) + j;
        const bool visible = key < p.seqlen_k && (!p.is_causal || key <= row[r]);
        float& x = s[nt][2 * r + j];
        x = visible ? x * score_scale : -INFINITY;
        tile_max = fmaxf(tile_max, x);
      }
    }
    const float correction = softmax[r].rescale(group_max<4>(tile_max), &offset[r]);
#pragma unroll
    for (int dt = 0; dt < kOTiles; ++dt) {
      o[dt][2 * r] *= correction;
      o[dt][2 * r + 1] *= correction;
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[nt][i] = exp2f(s[nt][i] - offset[i / 2]);
      softmax[i / 2].sum += s[nt][i];
    }
  }
}

// The fp16 A fragment of P for keys [16 kt, 16 kt + 16): exactly the C accumulators of n-tiles 2 kt and 2 kt + 1.
template <int kNTiles>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[kNTiles][4], int kt) {
  a[0] = pack_half2(s[2 * kt][0], s[2 * kt][1]);
  a[1] = pack_half2(s[2 * kt][2], s[2 * kt][3]);
  a[2] = pack_half2(s[2 * kt + 1][0], s[2 * kt + 1][1]);
  a[3] = pack_half2(s[2 * kt + 1][2], s[2 * kt + 1][3]);
}

}  // namespace sdpa
