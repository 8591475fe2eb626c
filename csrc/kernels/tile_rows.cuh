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
  __device__ int offset(int chunk) const { return chunk * 16; }  // in a dense [kRows][kCols] tile
  __device__ bool valid(int chunk) const { return key0 + row(chunk) < seqlen; }
  __device__ const uint8_t* src(int chunk) const {
    return valid(chunk) ? head + (key0 + row(chunk)) * row_stride + col(chunk) : head;
  }
};

// Starts cp.async copies of the tile into a dense [kRows][kCols] code buffer; rows past seqlen become 0.
template <int kRows, int kCols>
__device__ __forceinline__ void copy_tile_async(uint8_t* dst, const TileRows<kRows, kCols>& rows, int threads) {
  for (int ch = threadIdx.x; ch < TileRows<kRows, kCols>::kChunks; ch += threads) {
    cp_async_16(dst + rows.offset(ch), rows.src(ch), rows.valid(ch));
  }
}

}  // namespace sdpa
