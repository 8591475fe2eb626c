// A tile of kRows consecutive rows (from row0) of one K or V head, addressed in 16-byte chunks of E4M3 codes.
#pragma once

#include <cstdint>

#include "ptx.cuh"

namespace sdpa {

template <int kRows, int kCols>
struct TileRows {
  static constexpr int kChunksPerRow = kCols / 16;
  static constexpr int kChunks = kRows * kChunksPerRow;
  const uint8_t* head;
  int64_t row_stride;
  int key0, seqlen;

  __device__ int row(int chunk) const { return chunk / kChunksPerRow; }
  __device__ int col(int chunk) const { return chunk % kChunksPerRow * 16; }
  __device__ bool valid(int chunk) const { return key0 + row(chunk) < seqlen; }
  __device__ const uint8_t* src(int chunk) const {
    return valid(chunk) ? head + (key0 + row(chunk)) * row_stride + col(chunk) : head;
  }
};

// A dense [rows][kCols] code buffer.
template <int kCols>
struct DenseCodeLayout {
  static constexpr int kRowPeriod = 1;  // offset(r + kRowPeriod, c) = offset(r, c) + kRowPeriod * kCols
  __device__ static int offset(int row, int col) { return row * kCols + col; }
};

// A [rows][kCols] code buffer whose 16-byte chunks are XOR-swizzled so that the 8 rows an ldmatrix phase reads
// at one chunk column land in 8 different bank groups (128- and 256-byte rows: chunk ^ row % 8; 64-byte rows:
// chunk ^ (row / 2) % 4).
template <int kCols>
struct SwizzledCodeLayout {
  static constexpr int kChunks = kCols / 16;
  static_assert(kChunks == 4 || kChunks == 8 || kChunks == 16, "64-, 128- or 256-byte rows");
  static constexpr int kRowPeriod = 8;  // offset(r + kRowPeriod, c) = offset(r, c) + kRowPeriod * kCols
  __device__ static int offset(int row, int col) {
    const int flip = kChunks == 4 ? row / 2 % 4 : row % 8;
    return row * kCols + ((col / 16) ^ flip) * 16 + col % 16;
  }
};

// An fp16 tile of kCols halves per row, addressed in 16-byte chunks; with kSwizzle the chunk index is XORed
// with row % 8, so the 8 rows an ldmatrix phase reads land in 8 different bank groups.
template <int kCols, bool kSwizzle>
struct HalfTileLayout {
  static_assert(kCols % 64 == 0, "swizzling needs at least 8 chunks per row");
  __device__ static int offset(int row, int col) {
    const int chunk = (col / 8) ^ (kSwizzle ? row % 8 : 0);
    return row * kCols + chunk * 8 + col % 8;
  }
};

// An fp16 tile of kRows rows as 64-dim panels, each a swizzled HalfTileLayout of 128-byte rows (the 128-byte
// swizzle of wgmma's canonical layouts); offsets in halves.
template <int kRows>
struct HalfPanelLayout {
  __device__ static int offset(int row, int dim) {
    return dim / 64 * kRows * 64 + HalfTileLayout<64, true>::offset(row, dim % 64);
  }
};

// Converts 8 consecutive codes (two words) into 8 halves. The shifts stay: with e4m3x2_high_to_half2 instead,
// `wgmma` took 1044 against 989 us at 1x16x8192x128 (H200, same run; why was not analysed).
__device__ __forceinline__ uint4 decode_8(uint32_t lo, uint32_t hi) {
  return make_uint4(e4m3x2_to_half2(static_cast<uint16_t>(lo & 0xFFFFu)), e4m3x2_to_half2(static_cast<uint16_t>(lo >> 16)),
                    e4m3x2_to_half2(static_cast<uint16_t>(hi & 0xFFFFu)), e4m3x2_to_half2(static_cast<uint16_t>(hi >> 16)));
}

// Converts 16 consecutive codes of one row into two 16-byte fp16 chunks at Layout::offset (in halves).
template <class Layout>
__device__ __forceinline__ void store_decoded_16(__half* tile, int row, int col, uint4 codes) {
  *reinterpret_cast<uint4*>(tile + Layout::offset(row, col)) = decode_8(codes.x, codes.y);
  *reinterpret_cast<uint4*>(tile + Layout::offset(row, col + 8)) = decode_8(codes.z, codes.w);
}

// S = Q K^T of a warp's 16 query rows against an fp16 K tile [kNTiles * 8 keys][dims] in shared memory laid out
// by Layout (offsets in halves): mma.sync m16n8k16 with fp32 sums, Q as fp16 A fragments, K by ldmatrix.x4 (two
// 8-key n-tiles x two 8-dim halves of a k-step at a time). q_fragment(ks, a) gives the A fragment of k-step ks.
template <class Layout, int kKSteps, int kNTiles, class QFragment>
__device__ __forceinline__ void half_tile_scores(float (&s)[kNTiles][4], QFragment q_fragment, const __half* k_tile,
                                                 int lane) {
  const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    uint32_t a[4];
    q_fragment(ks, a);
#pragma unroll
    for (int nt = 0; nt < kNTiles / 2; ++nt) {
      uint32_t b[4];
      ldmatrix_x4(b, k_tile + Layout::offset(nt * 16 + (mat / 2) * 8 + mat_row, ks * 16 + (mat % 2) * 8));
      mma_16x8x16(s[2 * nt], a, b[0], b[1]);
      mma_16x8x16(s[2 * nt + 1], a, b[2], b[3]);
    }
  }
}
// The same with Q's A fragments in registers.
template <class Layout, int kKSteps, int kNTiles>
__device__ __forceinline__ void half_tile_scores(float (&s)[kNTiles][4], const uint32_t (&q)[kKSteps][4],
                                                 const __half* k_tile, int lane) {
  half_tile_scores<Layout, kKSteps>(s, [&](int ks, uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = q[ks][i];
  }, k_tile, lane);
}

// Starts cp.async copies of the tile into a code buffer of the given layout; rows past seqlen become 0. Thread
// `thread` of the kThreads taking part keeps one 16-byte column and copies every (kThreads / chunks per row)-th
// row: one 64-bit address per tile, then a constant step per chunk, and where the row step keeps the layout's
// swizzle (Layout::kRowPeriod) constant shared-memory offsets too. (Deriving row and column per chunk with signed
// divisions cost ~40 instructions a chunk; computing each chunk's row address, ~27: at 1x8x512x64 fp8_split
// spent 215 of its ~730 instructions per warp and tile issuing the next tile's copies, ncu on an H200.)
template <int kThreads, int kRows, int kCols, class Layout = DenseCodeLayout<kCols>>
__device__ __forceinline__ void copy_tile_async(uint8_t* dst, const TileRows<kRows, kCols>& rows, int thread) {
  constexpr int kChunksPerRow = TileRows<kRows, kCols>::kChunksPerRow, kRowStep = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0, "every thread keeps one column");
  constexpr bool kConstantOffsets = kRowStep % Layout::kRowPeriod == 0;
  const int col = static_cast<unsigned>(thread) % kChunksPerRow * 16;
  const int row0 = static_cast<unsigned>(thread) / kChunksPerRow;
  const int64_t step = kRowStep * rows.row_stride;
  const uint8_t* src = rows.head + (rows.key0 + row0) * rows.row_stride + col;
  uint8_t* first = dst + Layout::offset(row0, col);
#pragma unroll
  for (int j = 0; j < (kRows + kRowStep - 1) / kRowStep; ++j, src += step) {
    const int row = row0 + j * kRowStep;
    if (kRows % kRowStep != 0 && row >= kRows) break;
    const bool valid = rows.key0 + row < rows.seqlen;
    cp_async_16(kConstantOffsets ? first + j * kRowStep * kCols : dst + Layout::offset(row, col),
                valid ? src : rows.head, valid);
  }
}

}  // namespace sdpa
