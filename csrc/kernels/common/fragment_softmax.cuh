// The online-softmax step of the mma.sync kernels, on accumulators in the m16n8 C layout: lane l holds rows
// g = l / 4 and g + 8, columns 2 (l % 4) and 2 (l % 4) + 1 of every 8-key n-tile.
#pragma once

#include <cfloat>

#include "../quantize/encode.cuh"
#include "attention_common.cuh"
#include "ptx.cuh"

namespace sdpa {

// The multiplier from raw q.k (in code units) to log2 units, made positive: when the product of the scales is
// negative the caller flips the sign of its Q fragments instead (flip_q is set), so that the row max can be
// taken on raw scores. A zero scale becomes FLT_MIN: every visible score then maps to ~0 (uniform attention)
// while masked scores stay -inf instead of turning into NaN.
struct ScoreScale {
  float log2_units;
  bool flip_q;
  __device__ explicit ScoreScale(float product)
      : log2_units(fmaxf(fabsf(product * kLog2e), FLT_MIN)), flip_q(product < 0.0f) {}
  // The scale of one head, or of a group of its query rows: q_scale * k_scale * softmax_scale.
  __device__ ScoreScale(const AttentionParams& p, const HeadCoords& c, float q_scale)
      : ScoreScale(q_scale * p.k_scale[c.batch * p.heads_kv + c.head_kv] * p.softmax_scale) {}
  // The head's q_scale. (Where the kernel quantizes q rows itself, p.q_row_groups, there is none: the callers take
  // q_scale 1 until the rows' scale is known, whose sign every group's scale shares.)
  __device__ ScoreScale(const AttentionParams& p, const HeadCoords& c)
      : ScoreScale(p, c, p.q_scale[c.batch * p.heads_q + c.head_q]) {}
};

// Where a warp's Q fragments come from (FragmentRows::load_q_words): E4M3 codes, rows row_stride bytes apart (the
// decode kernel's staged rows)...
struct QueryCodes {
  const uint8_t* head;
  int64_t row_stride;
  int seqlen_q;
};
// The kernels that quantize q's rows themselves (p.q_row_groups), in chunks of 16 values of T: the chunk at column
// `col` of a row as two 16-byte vectors, zero where the row is not `real` (past seqlen_q) or past q's q_dims (a
// multiple of 8: a narrow q reads as zero-padded)...
template <typename T>
__device__ __forceinline__ void load_q_values(const T* row, int col, bool real, int q_dims, uint4 (&values)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int first = col + 8 * h;
    values[h] = real && first < q_dims ? *reinterpret_cast<const uint4*>(row + first) : make_uint4(0, 0, 0, 0);
  }
}
// ... and its 16 codes under `divisor`, every sign XOR `sign` (a negative score scale flips Q).
template <typename T>
__device__ __forceinline__ uint4 encode_q_values(const uint4 (&values)[2], const E4m3PowerOfTwoDivisor& divisor,
                                                 uint32_t sign) {
  uint32_t codes[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const T* elems = reinterpret_cast<const T*>(&values[h]);
    float x[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = to_float(elems[e]);
    divisor.encode(x, *reinterpret_cast<uint32_t(*)[2]>(&codes[2 * h]));
  }
  return make_uint4(codes[0] ^ sign, codes[1] ^ sign, codes[2] ^ sign, codes[3] ^ sign);
}

// ... or the q of an attention call at head c: its codes, or with p.q_row_groups its fp16 / bf16 values, which the
// warp quantizes itself (FragmentRows::quantize_q_chunks).
struct CallQuery {
  const AttentionParams& p;
  const HeadCoords& c;
};

// The causal offset, read where it is used (tied to key0): hoisted out of the key loop, it held a register that
// made `wgmma` at D = 128 and `wgmma_m192` spill 4 and 12 bytes (nvcc 13.0, sm_90a).
__device__ __forceinline__ int causal_shift(const AttentionParams& p, int key0) {
  return static_cast<int>(tied_to(static_cast<uint32_t>(p.causal_offset), key0));
}

// Masks keys past seqlen_k (and above the causal diagonal, shifted by causal_offset) of a tile of raw scores; only
// tiles that straddle the end of the keys or the diagonal need it (`tile_needs_mask`).
template <int kNTiles>
__device__ __forceinline__ void mask_tile(float (&s)[kNTiles][4], const int (&row)[2], int key0,
                                          const AttentionParams& p, int lane) {
  const int shift = causal_shift(p, key0);
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = key0 + nt * 8 + 2 * (lane % 4) + i % 2;
      if (key >= p.seqlen_k || (p.is_causal && key - shift > row[i / 2])) s[nt][i] = -INFINITY;
    }
  }
}

// Whether any of a warp's 16 rows starting at first_row must mask part of the keys [key0, key0 + keys).
__device__ __forceinline__ bool tile_needs_mask(const AttentionParams& p, int key0, int keys, int first_row) {
  return key0 + keys > p.seqlen_k || (p.is_causal && key0 + keys - 1 - causal_shift(p, key0) > first_row);
}

// Where a row's offset reaches this (in log2 units), its exp2 arguments take the scores scaled first.
constexpr float kPrescaledFrom = 0x1p22f;

// How exponentiate_in_place scales S first where it must (below): never (S is in log2 units already, or the row
// max was guessed, which warp_can_guess_max allows only below kPrescaledFrom), or in one of two code shapes that
// give the same P and differ in registers and time: in place ahead of the one loop (then with scale 1), or in a loop
// of its own. Ahead is the default; its own loop where ahead spilled, `wgmma+predecode` at D = 128 and the kernels
// that exponentiate in place (FragmentRows::exponentials: `wgmma`, `wgmma_m192`) 4 bytes each. Its own loop made
// the mma.sync kernels at D = 256 spill 12 bytes (nvcc 13.0, sm_90a), and `wgmma_fp8+fp8_pv` at 4x16x2048x128 2.6%
// slower (ncu, H100: 225.7 against 219.9 us; ahead 224.3 against 223.5 in another run).
enum class Prescale { kNever, kAhead, kOwnLoop };

// S = exp2(S * scale - offset[row]) in place, in fp32, and the sum of the lane's part of each row; one FFMA and
// one MUFU per score. The offset is the row max times the scale, rounded (ScaledRowSoftmax): the FFMA takes the
// max score's own product exactly, so the max's P is 2^(its rounding error), up to half an ulp of the offset:
// below kPrescaledFrom (ulp 0.5) at most 2^0.125, but 2^16 at 2^28, inf in fp16. Where any row of the warp
// reaches it, S is scaled first, with the same rounding as the max, so that the max's P is 2^kScaleLog2 (up to
// 2^(2 kScaleLog2) where the offset itself rounds, past 2^26); the other P keep the rounding of their logits,
// fp32's resolution there (2^-24 of the logit, as in the scalar kernel and torch's fp32 math).
template <Prescale kPrescale, int kNTiles>
__device__ __forceinline__ void exponentiate_in_place(float (&s)[kNTiles][4], float scale, const float (&offset)[2],
                                                      float (&tile_sum)[2]) {
  const bool prescale = kPrescale != Prescale::kNever && __any_sync(0xFFFFFFFFu, fabsf(offset[0]) >= kPrescaledFrom ||
                                                                             fabsf(offset[1]) >= kPrescaledFrom);
  tile_sum[0] = tile_sum[1] = 0.0f;
  if (kPrescale == Prescale::kOwnLoop && prescale) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[nt][i] = fast_exp2(__fmul_rn(s[nt][i], scale) - offset[i / 2]);
        tile_sum[i / 2] += s[nt][i];
      }
    }
    return;
  }
  if (kPrescale == Prescale::kAhead && prescale) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[nt][i] = __fmul_rn(s[nt][i], scale);
    }
    scale = 1.0f;
  }
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[nt][i] = fast_exp2(fmaf(s[nt][i], scale, -offset[i / 2]));
      tile_sum[i / 2] += s[nt][i];
    }
  }
}

// P of a tile as the fp16 A fragments of P V: probs[kt] covers keys [16 kt, 16 kt + 16), n-tiles 2 kt and 2 kt + 1
// of the C layout, which is exactly the A layout.
template <int kNTiles>
__device__ __forceinline__ void pack_probabilities(const float (&p)[kNTiles][4], uint32_t (&probs)[kNTiles / 2][4]) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    probs[nt / 2][2 * (nt % 2)] = pack_half2(p[nt][0], p[nt][1]);
    probs[nt / 2][2 * (nt % 2) + 1] = pack_half2(p[nt][2], p[nt][3]);
  }
}

// P of a tile as the E4M3 A fragments of a k32 P V (mma.sync m16n8k32 and wgmma's register operand): probs[kt]
// covers keys [32 kt, 32 kt + 32), registers 0 / 1 rows g / g + 8 at A positions 4c..4c + 3, registers 2 / 3 at
// 16 + 4c... The C layout gives lane c keys 2c, 2c + 1 of every 8, so position 4c + i of each 16 holds key
// 2c + i % 2 + 8 (i / 2) (key_of_position): the B operand (V) must list its keys in that order.
template <int kNTiles>
__device__ __forceinline__ void pack_probabilities(const float (&p)[kNTiles][4], uint32_t (&probs)[kNTiles / 4][4]) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; nt += 2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      probs[nt / 4][2 * (nt / 2 % 2) + r] =
          encode_e4m3x4(p[nt][2 * r], p[nt][2 * r + 1], p[nt + 1][2 * r], p[nt + 1][2 * r + 1]);
    }
  }
}

// The key (0-15) at position `position` of a 16-key group of pack_probabilities' E4M3 fragments.
__host__ __device__ constexpr int key_of_position(int position) {
  return 2 * (position / 4) + position % 2 + 8 * (position % 4 / 2);
}

// P = exp2(S * scale - offset[row]) of a tile, packed (pack_probabilities), with S left as it was.
template <Prescale kPrescale, int kNTiles, class Fragments>
__device__ __forceinline__ void exponentiate_tile(const float (&s)[kNTiles][4], float scale, const float (&offset)[2],
                                                  Fragments& probs, float (&tile_sum)[2]) {
  float p[kNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) p[nt][i] = s[nt][i];
  }
  exponentiate_in_place<kPrescale>(p, scale, offset, tile_sum);
  pack_probabilities(p, probs);
}

// Takes each row's max over a tile of raw scores into the running softmax state: the exp2 offset of each row and
// the factor correction[r] that rescales row r's O accumulators (a chain of FMNMX and two shuffles per row).
template <int kNTiles, class Softmax>
__device__ __forceinline__ void take_row_max(const float (&s)[kNTiles][4], Softmax (&softmax)[2], float scale,
                                             float (&offset)[2], float (&correction)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    correction[r] = softmax[r].rescale(group_max<4>(tile_max) * scale, &offset[r]);
  }
}

// The guessed row max of online_softmax_scores and FragmentRows::exponentials: a guess needs a max on every row
// of the warp, below kPrescaledFrom (so that the guess never scales S first: that branch beside the guess made the
// `wgmma*` consumers at D = 128 spill up to 336 bytes), and it held when every P of the warp stayed within
// kMaxProbability (the lane's row sums bound each P); then the tile's sums join the running ones (add_tile_sums)
// and keep_guessed_tile returns true.
template <class Softmax>
__device__ __forceinline__ bool warp_can_guess_max(const Softmax (&softmax)[2]) {
  return __all_sync(0xFFFFFFFFu, fabsf(softmax[0].max) < kPrescaledFrom && fabsf(softmax[1].max) < kPrescaledFrom);
}
template <class Softmax>
__device__ __forceinline__ void add_tile_sums(Softmax (&softmax)[2], const float (&tile_sum)[2]) {
  softmax[0].sum += tile_sum[0];
  softmax[1].sum += tile_sum[1];
}
template <class Softmax>
__device__ __forceinline__ bool keep_guessed_tile(Softmax (&softmax)[2], const float (&tile_sum)[2]) {
  constexpr float kMaxP = Softmax::kMaxProbability;
  if (!__all_sync(0xFFFFFFFFu, tile_sum[0] <= kMaxP && tile_sum[1] <= kMaxP)) return false;
  add_tile_sums(softmax, tile_sum);
  return true;
}

// Folds a tile of raw scores into the running max/sum of the lane's two rows and leaves P in probs
// (exponentiate_tile: fp16 or E4M3 fragments); correction[r] is the factor that rescales row r's O accumulators.
// The row sums stay per lane until the epilogue reduces them over the quad.
// With kGuessMax, once every row of the warp has a max, the tile is first exponentiated against it, on the guess
// that the max stays (ScaledRowSoftmax::kMaxSlack): if every P of the warp then stays within kMaxProbability
// (checked on the lane's row sums, which bound each P), that is the result the max would have given, and the row
// max (a chain of FMNMX and two shuffles per row that the exponentials had to wait for) is never taken. Otherwise,
// rarely after the first tiles, the tile is redone from its max. The decode kernels scale each row of S themselves
// (scale 1): they take kPrescale = Prescale::kNever.
template <bool kGuessMax, Prescale kPrescale = Prescale::kAhead, int kNTiles, class Softmax, class Fragments>
__device__ __forceinline__ void online_softmax_scores(const float (&s)[kNTiles][4], Softmax (&softmax)[2],
                                                      float scale, Fragments& probs, float (&correction)[2]) {
  float tile_sum[2];
  correction[0] = correction[1] = 1.0f;
  if (kGuessMax && warp_can_guess_max(softmax)) {
    const float offset[2] = {softmax[0].offset(), softmax[1].offset()};
    exponentiate_tile<Prescale::kNever>(s, scale, offset, probs, tile_sum);
    if (keep_guessed_tile(softmax, tile_sum)) return;
  }
  float offset[2];
  take_row_max(s, softmax, scale, offset, correction);
  exponentiate_tile<kPrescale>(s, scale, offset, probs, tile_sum);
  add_tile_sums(softmax, tile_sum);
}

// O *= correction per row; skipped when no row of the warp needs it, the usual case (ScaledRowSoftmax::kMaxSlack).
template <int kOTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kOTiles][4], const float (&correction)[2]) {
  if (!__any_sync(0xFFFFFFFFu, correction[0] != 1.0f || correction[1] != 1.0f)) return;
#pragma unroll
  for (int dt = 0; dt < kOTiles; ++dt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[dt][i] *= correction[i / 2];
  }
}

// The epilogue of a lane's two rows: reduces the row sums over the quad, lets store_row(out, r, out_scale) write
// O * out_scale in the kernel's own fragment order (every lane calls it for both rows, so that it may shuffle;
// out is null for a row past seqlen_q), then writes lse.
template <typename OutT, class Softmax, typename StoreRow>
__device__ __forceinline__ void finish_rows(Softmax (&softmax)[2], const int (&row)[2], const AttentionParams& p,
                                            const HeadCoords& c, int lane, StoreRow store_row) {
  const float v_scale = v_scale_of(p, c);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    softmax[r].sum = group_sum<4>(softmax[r].sum);
    const bool visible = row[r] < p.seqlen_q;
    store_row(visible ? out_row<OutT>(p, c, row[r]) : nullptr, r, v_scale / softmax[r].sum);
    if (visible && lane % 4 == 0) lse_of(p, c, row[r]) = softmax[r].lse();
  }
}

// Whether every output row of the block's head starts on a 16-byte boundary (the same for the whole block).
template <typename OutT>
__device__ __forceinline__ bool output_rows_16_byte_aligned(const AttentionParams& p, const HeadCoords& c) {
  return reinterpret_cast<uintptr_t>(out_row<OutT>(p, c, 0)) % 16 == 0 && p.out_row_stride * sizeof(OutT) % 16 == 0;
}

// The softmax side of a warp's 16 query rows in the register-softmax kernels, mma.sync and wgmma (lane l holds
// rows g = l / 4 and g + 8): the O accumulators, the running max/sum per row, and the scale. The kernels add
// their Q fragments and the Q K^T / P V products around `scores_to_probabilities` (or `probabilities` and
// `rescale_rows`, where a P V may still run during the softmax). Softmax is RowSoftmax, or for P cast to E4M3 a
// ScaledRowSoftmax.
template <int kOTiles, class Softmax = RowSoftmax, bool kRowGroups = false>
struct FragmentRows {
  float o[kOTiles][4] = {};  // O accumulators (unnormalized, in V-code units)
  Softmax softmax[2];        // rows g and g + 8; `sum` is this lane's partial sum until finish_rows
  int row[2];                // query indices of rows g and g + 8
  float score_scale;         // |q_scale * k_scale * softmax_scale| * log2(e), see ScoreScale
  // kRowGroups: the instantiation for a q of 16-bit values that the warp quantizes itself (p.q_row_groups; the
  // Hopper kernels at head dims up to 128: attention_variant_quantizes_q). A separate instantiation, so that the
  // others keep their code: with a branch on p.q_row_groups in every kernel, `fp8_split` at 1x8x512x64 took 4.72
  // against 4.45 us, `wgmma_fp8+fp8_pv` at 4x16x2048x128 184.5 against 181.2 (H100, graph us, three rounds each).
  static constexpr bool kQuantizesRows = kRowGroups;
  static_assert(!kRowGroups || kOTiles * 8 <= 128, "q row groups at head dims up to 128");

  // The warp's first query row, derived rather than kept: `wgmma_m192`'s consumers spilled with it in a register.
  __device__ int first_row(int lane) const { return row[0] - lane / 4; }

  // Sets the rows of warp `warp` in the block's tile at row0 and the head's scale; returns whether the Q
  // fragments must have their signs flipped (a negative scale).
  __device__ bool start(const AttentionParams& p, const HeadCoords& c, int row0, int warp, int lane) {
    row[0] = row0 + warp * 16 + lane / 4;
    row[1] = row[0] + 8;
    const ScoreScale scale = kQuantizesRows ? ScoreScale(p, c, 1.0f) : ScoreScale(p, c);
    score_scale = scale.log2_units;
    return scale.flip_q;
  }

  // The fp16 A fragments (m16n8k16) of the warp's 16 rows of Q, decoded from E4M3 codes with the sign flipped
  // when flip_sign; rows past seqlen_q read as 0.
  template <int kKSteps, class Query>
  __device__ void load_half_q(uint32_t (&q)[kKSteps][4], const Query& query, bool flip_sign, int lane) {
    uint32_t codes[kKSteps][2];
    load_half_q_codes(codes, query, flip_sign, lane);
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) half_q_fragment(codes[ks], q[ks]);
  }

  // The E4M3 codes of the fp16 A fragments (m16n8k16) of the warp's 16 rows of Q, half the registers: q[ks][r]
  // holds row g (r = 0) or g + 8 (r = 1) of k16 step ks, dims 2c, 2c + 1 in its low and 2c + 8, 2c + 9 in its high
  // half, so that half_q_fragment makes the four fp16 registers with one conversion each; signs flipped when
  // flip_sign; rows past seqlen_q read as 0, and are not read.
  template <int kKSteps, class Query>
  __device__ void load_half_q_codes(uint32_t (&q)[kKSteps][2], const Query& query, bool flip_sign, int lane) {
    load_q_words(q, query, flip_sign, lane, [](const uint4& chunk, int c) {
      // Halfwords c and c + 4 of the chunk (words c / 2 and 2 + c / 2).
      return __byte_perm(c < 2 ? chunk.x : chunk.y, c < 2 ? chunk.z : chunk.w, c % 2 ? 0x7632 : 0x5410);
    });
  }

  // The E4M3 A fragments of the warp's 16 rows of Q for k32 steps (mma.sync m16n8k32, and wgmma's register
  // operand, which lays out each warp's 16 rows the same way): regs 0/1 rows g/g+8 at dims 4c..4c+3, regs 2/3 at
  // +16; the sign of every code flipped when flip_sign; rows past seqlen_q read as 0.
  template <int kKSteps, class Query>
  __device__ void load_code_q(uint32_t (&q)[kKSteps][4], const Query& query, bool flip_sign, int lane) {
    uint32_t words[2 * kKSteps][2];
    load_q_words(words, query, flip_sign, lane, [](const uint4& chunk, int c) {
      return c == 0 ? chunk.x : c == 1 ? chunk.y : c == 2 ? chunk.z : chunk.w;  // word c: dims 4c .. 4c + 3
    });
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int i = 0; i < 4; ++i) q[ks][i] = words[2 * ks + i / 2][i % 2];
    }
  }

  // The word that lane c of the quad needs of each 16-code chunk of its two rows: words[k][r] = pick(chunk k of
  // row[r], c), where chunk k holds dims 16 k ... 16 k + 15; signs flipped when flip_sign, rows past seqlen_q zero
  // and not read. The lanes of a quad share their rows, so lane c takes chunks c, c + 4, ... (fetch_q_chunks),
  // picks every quad lane's word out of each and trades them over the quad (transpose_quad).
  template <int kChunks, class Query, class Pick>
  __device__ void load_q_words(uint32_t (&words)[kChunks][2], const Query& query, bool flip_sign, int lane,
                               Pick pick) {
    static_assert(kChunks % 4 == 0, "whole quads of chunks");
    uint4 chunks[kChunks / 4][2];
    fetch_q_chunks(chunks, query, flip_sign ? 0x80808080u : 0u, lane);
#pragma unroll
    for (int j = 0; j < kChunks / 4; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint32_t w[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) w[c] = pick(chunks[j][r], c);
        transpose_quad(w, lane);  // now w[k] is this lane's word of chunk 4 j + k
#pragma unroll
        for (int k = 0; k < 4; ++k) words[4 * j + k][r] = w[k];
      }
    }
  }

  // chunks[j][r]: the 16 codes of chunk 4 j + lane % 4 of row[r], XOR sign, with 16-byte loads (a warp's load takes
  // 64 contiguous bytes of each of its 8 rows). Every variant that loads Q here needs 16-byte aligned rows
  // (attention_dispatch.cu). Loading each word where it is needed took 2- or 4-byte loads, 8 rows apart per warp
  // instruction. At 4x16x2048x128 (H200, clock64 stamps, medians over the blocks after the first wave) the 32
  // two-byte loads per thread of `wgmma+predecode` had Q in registers 3.2k cycles after its consumers started, its
  // first K tile having landed before; now 2.0k. SM cycles of the attention kernel (base clock): 365.0k -> 362.1k,
  // causal (`wgmma`) 227.0k -> 220.7k.
  template <int kSets>
  __device__ void fetch_q_chunks(uint4 (&chunks)[kSets][2], const QueryCodes& q, uint32_t sign, int lane) const {
#pragma unroll
    for (int j = 0; j < kSets; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        chunks[j][r] = make_uint4(0u, 0u, 0u, 0u);
        if (row[r] < q.seqlen_q) {
          const uint4 c = *reinterpret_cast<const uint4*>(q.head + row[r] * q.row_stride + 16 * (4 * j + lane % 4));
          chunks[j][r] = make_uint4(c.x ^ sign, c.y ^ sign, c.z ^ sign, c.w ^ sign);
        }
      }
    }
  }
  template <int kSets>
  __device__ void fetch_q_chunks(uint4 (&chunks)[kSets][2], const CallQuery& q, uint32_t sign, int lane) {
    if constexpr (!kQuantizesRows) {
      fetch_q_chunks(chunks, QueryCodes{q_head(q.p, q.c), q.p.q_row_stride, q.p.seqlen_q}, sign, lane);
    } else if (q.p.q_type == QueryType::kBFloat16) {
      quantize_q_chunks<__nv_bfloat16>(chunks, q.p, q.c, sign, lane);
    } else {
      quantize_q_chunks<__half>(chunks, q.p, q.c, sign, lane);
    }
  }

  // The chunks of fetch_q_chunks from 16-bit values (p.q_row_groups), quantized with the scale of the warp's 16
  // rows (power_of_two_scale), which score_scale then includes. The quad lanes read each row whole and the warp
  // holds its 16 rows, so one warp max gives the amax. The values are held from their load to their encode (32
  // registers at D = 128), before the key loop needs its registers.
  template <typename T, int kSets>
  __device__ void quantize_q_chunks(uint4 (&chunks)[kSets][2], const AttentionParams& p, const HeadCoords& c,
                                    uint32_t sign, int lane) {
    const T* head = reinterpret_cast<const T*>(p.q) + c.batch * p.q_batch_stride + c.head_q * p.q_head_stride;
    uint4 raw[kSets][2][2];  // chunk 4 j + lane % 4 of row[r]
#pragma unroll
    for (int j = 0; j < kSets; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        load_q_values(head + row[r] * p.q_row_stride, 16 * (4 * j + lane % 4), row[r] < p.seqlen_q, p.q_dims,
                      raw[j][r]);
      }
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kSets; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) amax = fmaxf(amax, vector_amax<T>(raw[j][i / 2][i % 2]));
    }
    const float scale = power_of_two_scale(group_max<32>(amax));
    score_scale = ScoreScale(p, c, scale).log2_units;
    const E4m3PowerOfTwoDivisor divisor(scale);
#pragma unroll
    for (int j = 0; j < kSets; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) chunks[j][r] = encode_q_values<T>(raw[j][r], divisor, sign);
    }
  }

  // Masks the tile if it needs it and turns raw scores into P, packed as fp16 or E4M3 A fragments in probs (see
  // online_softmax_scores); O must then be rescaled by correction before the next P V adds to it.
  template <bool kGuessMax, Prescale kPrescale = Prescale::kAhead, int kNTiles, class Fragments>
  __device__ void probabilities(float (&s)[kNTiles][4], int key0, const AttentionParams& p, int lane,
                                Fragments& probs, float (&correction)[2]) {
    if (tile_needs_mask(p, key0, kNTiles * 8, first_row(lane))) mask_tile(s, row, key0, p, lane);
    online_softmax_scores<kGuessMax, kPrescale>(s, softmax, score_scale, probs, correction);
  }

  // Masks the tile if it needs it and replaces the raw scores by P in fp32, for kernels that pack P
  // (pack_probabilities) only once the P V that reads the previous fragments is done; O must be rescaled by
  // correction before the next P V adds to it. The row max is guessed as in online_softmax_scores; when the guess
  // fails the exponentials have replaced the scores, so recompute(s) must write the raw scores again.
  template <int kNTiles, class Recompute>
  __device__ void exponentials(float (&s)[kNTiles][4], int key0, const AttentionParams& p, float (&correction)[2],
                               Recompute recompute) {
    const bool masked = tile_needs_mask(p, key0, kNTiles * 8, first_row(lane_now()));
    if (masked) mask_tile(s, row, key0, p, lane_now());
    float offset[2], tile_sum[2];
    correction[0] = correction[1] = 1.0f;
    if (warp_can_guess_max(softmax)) {
      offset[0] = softmax[0].offset(), offset[1] = softmax[1].offset();
      exponentiate_in_place<Prescale::kNever>(s, score_scale, offset, tile_sum);
      if (keep_guessed_tile(softmax, tile_sum)) return;
      recompute(s);
      if (masked) mask_tile(s, row, key0, p, lane_now());
    }
    take_row_max(s, softmax, score_scale, offset, correction);
    exponentiate_in_place<Prescale::kOwnLoop>(s, score_scale, offset, tile_sum);
    add_tile_sums(softmax, tile_sum);
  }

  // probabilities, then O rescaled for the tile; no P V may be in flight.
  template <bool kGuessMax, Prescale kPrescale = Prescale::kAhead, int kNTiles, class Fragments>
  __device__ void scores_to_probabilities(float (&s)[kNTiles][4], int key0, const AttentionParams& p, int lane,
                                          Fragments& probs) {
    float correction[2];
    probabilities<kGuessMax, kPrescale>(s, key0, p, lane, probs, correction);
    rescale_rows(o, correction);
  }

  // Writes O / rowsum * v_scale and the lse of the lane's rows; o[dt] holds dims 8 dt + 2 (lane % 4) and + 1.
  // Where the rows allow it, each quad transposes its words so that a lane stores 8 consecutive outputs at once:
  // with 4-byte stores, one per o[dt] pair, each store waited for the previous one to read its register, and the
  // epilogue took ~10% of the `wgmma` consumers' time at 4x16x2048x128 (ncu source counters, H200).
  template <typename OutT>
  __device__ void store_output(const AttentionParams& p, const HeadCoords& c, int lane) {
    const bool wide = kOTiles % 4 == 0 && output_rows_16_byte_aligned<OutT>(p, c);
    finish_rows<OutT>(softmax, row, p, c, lane, [&](OutT* out, int r, float out_scale) {
      if (wide) {
#pragma unroll
        for (int dt0 = 0; dt0 < kOTiles; dt0 += 4) {
          uint32_t w[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            w[j] = pack_outputs<OutT>(o[dt0 + j][2 * r] * out_scale, o[dt0 + j][2 * r + 1] * out_scale);
          }
          transpose_quad(w, lane);  // lane c: dims 8 (dt0 + c) .. + 7
          if (out != nullptr && 8 * (dt0 + lane % 4) < p.out_dims) {
            *reinterpret_cast<uint4*>(out + 8 * (dt0 + lane % 4)) = make_uint4(w[0], w[1], w[2], w[3]);
          }
        }
      } else if (out != nullptr) {
#pragma unroll
        for (int dt = 0; dt < kOTiles; ++dt) {
          const float pair[2] = {o[dt][2 * r], o[dt][2 * r + 1]};
          if (dt * 8 < p.out_dims) store_outputs(out + dt * 8 + 2 * (lane % 4), pair, out_scale);
        }
      }
    });
  }
};

}  // namespace sdpa
