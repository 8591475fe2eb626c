// The pass of transpose_values.h. A block takes 128 keys of a kv head: it stages their V codes in shared memory,
// then each thread gathers 4 dims of 16 keys (16 words of 4 bytes, in key_of_position order), transposes them as
// 4 x 4 byte blocks and stores 16 bytes into each of 4 rows of V^T, so that 8 lanes fill a row's 128 bytes.
#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "transpose_values.h"

namespace sdpa {
namespace {

constexpr int kKeys = 128;  // per block: 8 groups of 16 keys
constexpr int kGroups = kKeys / 16;

// The 16-byte chunks of key row `key` are XOR-swizzled by the key's group of 16, so that the 8 lanes of a gather,
// one per group, read 8 different bank groups at D = 128 (at D = 64, with 4 chunks a row, two lanes share one).
template <int kD>
__device__ __forceinline__ int staged_offset(int key, int chunk) {
  constexpr int kChunks = kD / 16, kFlips = kChunks < 8 ? kChunks : 8;
  return key * kD + (chunk ^ (key / 16 % kFlips)) * 16;
}

// Rows i = 0..3 of a 4 x 4 byte block: byte i of each of w[0..3].
__device__ __forceinline__ void transpose_4x4(const uint32_t (&w)[4], uint32_t (&rows)[4]) {
  const uint32_t low01 = __byte_perm(w[0], w[1], 0x5140), high01 = __byte_perm(w[0], w[1], 0x7362);
  const uint32_t low23 = __byte_perm(w[2], w[3], 0x5140), high23 = __byte_perm(w[2], w[3], 0x7362);
  rows[0] = __byte_perm(low01, low23, 0x5410);
  rows[1] = __byte_perm(low01, low23, 0x7632);
  rows[2] = __byte_perm(high01, high23, 0x5410);
  rows[3] = __byte_perm(high01, high23, 0x7632);
}

// The blocks of a kv head, kKeys keys each.
SDPA_HOST_DEVICE int key_blocks_of(const AttentionParams& p) { return (p.seqlen_k + kKeys - 1) / kKeys; }

// V^T into p.workspace, [B * Hkv][D][transposed_values_row_bytes].
template <int kD>
__global__ void __launch_bounds__(2 * kD) transpose_values_kernel(const AttentionParams p) {
  constexpr int kThreads = 2 * kD, kChunks = kD / 16;
  static_assert(kThreads == kD / 4 * kGroups, "one gather per thread");
  __shared__ __align__(16) uint8_t staged[kKeys * kD];
  allow_next_grid_launch();
  // Before any access: the kernel before may still be writing the codes, or the attention of the previous call
  // reading a V^T whose workspace the allocator has handed to this one.
  wait_for_previous_grids();
  const int key_blocks = key_blocks_of(p), head = blockIdx.x / key_blocks, key0 = blockIdx.x % key_blocks * kKeys;
  const int64_t row_bytes = transposed_values_row_bytes(p);
  const uint8_t* v = p.v + head / p.heads_kv * p.v_batch_stride + head % p.heads_kv * p.v_head_stride;
#pragma unroll
  for (int i = 0; i < kKeys * kChunks / kThreads; ++i) {
    const int piece = threadIdx.x + i * kThreads, key = piece / kChunks, chunk = piece % kChunks;
    uint4 codes = make_uint4(0, 0, 0, 0);  // keys past seqlen_k: zero codes
    if (key0 + key < p.seqlen_k) {
      codes = *reinterpret_cast<const uint4*>(v + static_cast<int64_t>(key0 + key) * p.v_row_stride + chunk * 16);
    }
    *reinterpret_cast<uint4*>(staged + staged_offset<kD>(key, chunk)) = codes;
  }
  __syncthreads();
  const int group = threadIdx.x % kGroups, dim0 = threadIdx.x / kGroups * 4;
  if (key0 + 16 * group >= row_bytes) return;
  uint32_t words[16];  // dims dim0..dim0 + 3 of the group's keys, in fragment order
#pragma unroll
  for (int position = 0; position < 16; ++position) {
    const int key = 16 * group + key_of_position(position);
    words[position] = *reinterpret_cast<const uint32_t*>(staged + staged_offset<kD>(key, dim0 / 16) + dim0 % 16);
  }
  uint32_t rows[4][4];  // [quarter of the positions][dim]
#pragma unroll
  for (int quarter = 0; quarter < 4; ++quarter) {
    transpose_4x4({words[4 * quarter], words[4 * quarter + 1], words[4 * quarter + 2], words[4 * quarter + 3]},
                  rows[quarter]);
  }
  uint8_t* dst = static_cast<uint8_t*>(p.workspace) + (static_cast<int64_t>(head) * kD + dim0) * row_bytes + key0 +
                 16 * group;
#pragma unroll
  for (int dim = 0; dim < 4; ++dim) {
    *reinterpret_cast<uint4*>(dst + dim * row_bytes) =
        make_uint4(rows[0][dim], rows[1][dim], rows[2][dim], rows[3][dim]);
  }
}

}  // namespace

bool values_by_pass_pays(const AttentionParams& p, int block_m) {
  const int64_t blocks_per_kv_head = static_cast<int64_t>(query_tiles(p, block_m)) * (p.heads_q / p.heads_kv);
  return blocks_per_kv_head >= (p.is_causal ? 128 : 32);
}

int64_t transposed_values_workspace_bytes(const AttentionParams& p) {
  if (!values_by_pass_pays(p, kValuesByPassBlockM)) return 0;
  return static_cast<int64_t>(p.batch) * p.heads_kv * p.head_dim * transposed_values_row_bytes(p);
}

cudaError_t launch_transpose_values(const AttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(static_cast<int64_t>(p.batch) * p.heads_kv * key_blocks_of(p)));
  if (p.head_dim == 64) {
    return launch_overlapping(p.overlap_launch, transpose_values_kernel<64>, grid, 128, 0, stream, p);
  }
  if (p.head_dim == 128) {
    return launch_overlapping(p.overlap_launch, transpose_values_kernel<128>, grid, 256, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sdpa
