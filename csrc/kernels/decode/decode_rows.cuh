// A warp's 16 packed rows in the decode kernel, whichever instructions multiply them (DecodeWarp: mma.sync;
// DecodeWarpgroup: wgmma): per row the score scale of its query head and the keys it sees, and the step that turns
// a tile of raw scores into masked scores in log2 units.
#pragma once

#include <cmath>

#include "../common/fragment_softmax.cuh"
#include "decode_query.cuh"

namespace sdpa {

template <int kHeadDim>
struct DecodeRows : FragmentRows<kHeadDim / 8> {
  using FragmentRows<kHeadDim / 8>::row;
  float scale[2];   // rows g and g + 8: score scale in log2 units
  int key_end[2];   // and one past the last key each sees
  int min_key_end;  // the smallest over the warp: tiles below it need no mask

  // The rows of warp `row_group` (16 packed rows each) of the block; row_scale holds each row's score scale.
  __device__ void set_rows(const AttentionParams& p, const DecodeBlock& blk, const float* row_scale, int row_group,
                           int lane) {
    row[0] = row_group * 16 + lane / 4;
    row[1] = row[0] + 8;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool real = row[r] < blk.rows;
      scale[r] = real ? row_scale[row[r]] : 0.0f;
      key_end[r] = real ? blk.key_end(p, (blk.row0 + row[r]) % p.seqlen_q) : 0;
    }
    min_key_end = __reduce_min_sync(0xFFFFFFFFu, min(key_end[0], key_end[1]));
  }

  // Scales the raw scores of the keys from key0 on (m16n8 C fragments) and masks the keys each row does not see.
  // Only tiles that reach min_key_end mask. kBranch puts the mask behind a warp-uniform branch: `decode_wgmma`'s
  // issue-bound loop spent ~40 of its ~350 instructions per warp and tile on a mask folded into one select per score
  // (sm_90a); the mma.sync warps keep the select, as the branch took the 32-row D = 64 blocks on sm_80 from 134
  // registers to 128 and a spill.
  template <bool kBranch = false, int kNTiles>
  __device__ void scale_and_mask(float (&s)[kNTiles][4], int key0, int lane) const {
    const bool masked = key0 + kNTiles * 8 > min_key_end;
    if (kBranch && !masked) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nt][i] *= scale[i / 2];
      }
      return;
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + nt * 8 + 2 * (lane % 4) + i % 2;
        s[nt][i] = masked && key >= key_end[i / 2] ? -INFINITY : s[nt][i] * scale[i / 2];
      }
    }
  }
};

}  // namespace sdpa
