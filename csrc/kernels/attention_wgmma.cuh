// The Hopper variant `wgmma` (sm_90a): warpgroup MMA with a producer warpgroup, FlashAttention-3 style.
//
// A block owns kBlockM = 128 query rows and runs three warpgroups:
//   producer     one thread starts TMA copies of the block's Q codes once and of each K/V tile (kBlockN = 128
//                keys) into a ring of kStages slots; the warpgroup decodes V to fp16 in shared memory (the fp16 B
//                operand of P V), flips the sign of Q's codes when the scale product is negative, and hands each
//                slot over with a named barrier.
//   2 consumers  64 query rows each; per tile
//                  S = Q K^T   wgmma m64n128k32 e4m3 on the raw codes, both from shared memory (exact products,
//                              fp32 sums)
//                  softmax     in registers: wgmma's accumulators are, per warp, the m16n8 C layout of 16 rows,
//                              so fragment_softmax.cuh applies unchanged
//                  O += P V    wgmma m64nDk16 f16, P from registers (the S accumulators re-packed), V N-major
// P stays fp16: the full precision tier. Producers give up registers (setmaxnreg) to the consumers, which hold
// S (64 floats), P (32 words) and O (D / 2 floats) per thread.
//
// Shared memory, every tile on a 1024-byte boundary (the hardware swizzle follows absolute address bits):
//   Q codes [128][D], then per slot K codes [128][D], V codes [128][D] (staging), V fp16 as D / 64 panels of
//   [128 keys][64 dims], then the mbarriers of the TMA copies. Q and K use the TMA's (and wgmma's) 64- or
//   128-byte swizzle of rows of D bytes (SwizzledCodeLayout), V codes none, the V panels the 128-byte swizzle
//   (chunk ^ key % 8), written by the producers.
// The copies use TMA rather than cp.async because the proxy fence that must follow cp.async before wgmma may read
// the data (MEMBAR.ALL.CTA in SASS) waits for every copy still in flight: with cp.async the ring never held more
// than one tile in flight and the kernel took 401 us at 4x16x2048x128, 331 us with the V decode removed and 244 us
// with no loads at all (H200, nvcc 13.0).
#pragma once

#include "attention_common.cuh"
#include "fragment_softmax.cuh"
#include "ptx.cuh"
#include "tile_rows.cuh"
#include "hopper.cuh"

namespace sdpa {

// Ring depth: the producer refills a slot while the consumers work through the other two (at D = 128, three
// slots and Q take 209 KB of the 227 KB a block may have).
constexpr int kWgmmaStages = 3;

template <int kHeadDim_, int kStages_>
struct WgmmaConfig {
  static constexpr int kHeadDim = kHeadDim_, kStages = kStages_;
  static constexpr int kConsumerGroups = 2;
  static constexpr int kBlockM = 64 * kConsumerGroups, kBlockN = 128;
  static constexpr int kConsumerThreads = 128 * kConsumerGroups, kProducerThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kQBytes = kBlockM * kHeadDim;
  static constexpr int kCodeTileBytes = kBlockN * kHeadDim;
  static constexpr int kPanelBytes = kBlockN * 64 * 2;  // 64 dims of fp16 V
  static constexpr int kSlotBytes = 2 * kCodeTileBytes + kHeadDim / 64 * kPanelBytes;
  static constexpr int kBarrierBytes = 8 * (kStages + 1);  // an mbarrier per slot and one for Q
  static constexpr int kSmemBytes = 1024 + kQBytes + kStages * kSlotBytes + kBarrierBytes;  // + aligning the base
  // 256 x 232 + 128 x 40 = 64512 of the SM's 65536 registers.
  static constexpr int kConsumerRegisters = 232, kProducerRegisters = 40;
  using KvRows = TileRows<kBlockN, kHeadDim>;
};

// TMA descriptors of the q, k and v codes as [B, H, S, D] tensors, with boxes of kBlockM (q) and kBlockN (k, v)
// rows: q and k swizzled for wgmma, v plain.
struct WgmmaMaps {
  CUtensorMap q, k, v;
};

// fp16 V as 64-dim panels of 128-byte rows (one key per row), chunk index ^ key % 8; offsets in halves.
template <int kBlockN>
struct VPanelLayout {
  __device__ static int offset(int key, int dim) {
    return dim / 64 * kBlockN * 64 + key * 64 + ((dim % 64 / 8) ^ (key % 8)) * 8 + dim % 8;
  }
};

template <class Cfg>
struct WgmmaSmem {
  uint8_t* base;  // 1024-byte aligned

  __device__ uint8_t* q() const { return base; }
  __device__ uint8_t* k_codes(int slot) const { return base + Cfg::kQBytes + slot * Cfg::kSlotBytes; }
  __device__ uint8_t* v_codes(int slot) const { return k_codes(slot) + Cfg::kCodeTileBytes; }
  __device__ __half* v_halves(int slot) const {
    return reinterpret_cast<__half*>(v_codes(slot) + Cfg::kCodeTileBytes);
  }
  __device__ uint64_t* tile_loaded(int slot) const {
    return reinterpret_cast<uint64_t*>(base + Cfg::kQBytes + Cfg::kStages * Cfg::kSlotBytes) + slot;
  }
  __device__ uint64_t* q_loaded() const { return tile_loaded(Cfg::kStages); }
};

// Named barriers (id 0 is __syncthreads'):
//   FULL(slot, group)  the producers arrive, consumer warpgroup `group` waits: one per group, so that the two
//                      groups need not meet at every tile (they run half a tile apart, see TURN)
//   CODES_FREE(slot)   both groups arrive once Q K^T of the slot's tile is done: its K codes (and the V codes the
//                      producers already decoded) may be overwritten
//   HALVES_FREE(slot)  both groups arrive once P V of the slot's tile is done: its fp16 V may be overwritten
//   PRODUCERS          among the producer warpgroup
//   TURN(group)        the other group arrives when `group` may issue its next wgmma batch
template <class Cfg>
struct WgmmaBarriers {
  __device__ static int full(int slot, int group) { return 1 + 2 * slot + group; }
  __device__ static int codes_free(int slot) { return 1 + 2 * Cfg::kStages + slot; }
  __device__ static int halves_free(int slot) { return 1 + 3 * Cfg::kStages + slot; }
  static constexpr int kProducers = 1 + 4 * Cfg::kStages;
  __device__ static int turn(int group) { return 2 + 4 * Cfg::kStages + group; }
  static constexpr int kGroupPair = Cfg::kProducerThreads + 128;  // FULL and TURN: 128 + 128 threads
  static_assert(2 + 4 * Cfg::kStages + 1 < 16, "16 named barriers per block");
  // Whether the consumers must free tile t's slot: the producers wait only for the slots they refill.
  __device__ static bool refilled(int tile, int tiles) { return tile >= 0 && tile + Cfg::kStages < tiles; }
};

// The producer warpgroup: Q once, then per tile the K and V codes by TMA (kStages - 1 tiles ahead) and V decoded
// to fp16. Code slots are refilled once the consumers' Q K^T of their previous tile is done, fp16 V slots once its
// P V is done (two tiles later in the consumers' pipeline).
template <class Cfg>
__device__ __forceinline__ void produce_tiles(const WgmmaSmem<Cfg>& smem, const WgmmaMaps& maps, const HeadCoords& c,
                                              int row0, int tiles, bool flip_q) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN, kD = Cfg::kHeadDim, kP = Cfg::kProducerThreads;
  const int tid = threadIdx.x - Cfg::kConsumerThreads;
  const bool elected = tid == 0;  // starts every copy
  if (elected) {
    for (int slot = 0; slot <= Cfg::kStages; ++slot) mbarrier_init(smem.tile_loaded(slot), 1);
    fence_mbarrier_init();
    mbarrier_arrive_expect_bytes(smem.q_loaded(), Cfg::kQBytes);
    tma_load_4d(smem.q(), maps.q, 0, row0, c.head_q, c.batch, smem.q_loaded());
  }
  barrier_sync(Bars::kProducers, kP);  // the mbarriers are initialized
  auto issue = [&](int tile) {
    if (elected && tile < tiles) {
      const int slot = tile % Cfg::kStages;
      mbarrier_arrive_expect_bytes(smem.tile_loaded(slot), 2 * Cfg::kCodeTileBytes);
      tma_load_4d(smem.k_codes(slot), maps.k, 0, tile * kN, c.head_kv, c.batch, smem.tile_loaded(slot));
      tma_load_4d(smem.v_codes(slot), maps.v, 0, tile * kN, c.head_kv, c.batch, smem.tile_loaded(slot));
    }
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(t);

  for (int tile = 0; tile < tiles; ++tile) {
    const int slot = tile % Cfg::kStages;
    mbarrier_wait(smem.tile_loaded(slot), tile / Cfg::kStages % 2);
    if (tile == 0 && flip_q) {
      mbarrier_wait(smem.q_loaded(), 0);
      for (int i = tid; i < Cfg::kQBytes / 16; i += kP) {  // the sign bit of every code, wherever it sits
        uint4* codes = reinterpret_cast<uint4*>(smem.q()) + i;
        const uint4 q = *codes;
        *codes = make_uint4(q.x ^ 0x80808080u, q.y ^ 0x80808080u, q.z ^ 0x80808080u, q.w ^ 0x80808080u);
      }
    }
    if (Bars::refilled(tile - Cfg::kStages, tiles)) barrier_sync(Bars::halves_free(slot), Cfg::kThreads);
    const uint8_t* v_codes = smem.v_codes(slot);
    __half* v_halves = smem.v_halves(slot);
#pragma unroll 2  // 4 spills 8 bytes at D = 64 within the producers' 40 registers (nvcc 13.0)
    for (int ch = tid; ch < Cfg::KvRows::kChunks; ch += kP) {
      const int row = ch / Cfg::KvRows::kChunksPerRow, col = ch % Cfg::KvRows::kChunksPerRow * 16;
      store_decoded_16<VPanelLayout<kN>>(v_halves, row, col,
                                         *reinterpret_cast<const uint4*>(v_codes + row * kD + col));
    }
    fence_proxy_async();  // this thread's st.shared (V, Q's sign) before wgmma reads them
    barrier_arrive(Bars::full(slot, 0), Bars::kGroupPair);
    barrier_arrive(Bars::full(slot, 1), Bars::kGroupPair);
    // The next copy overwrites the codes of tile - 1: its K once the consumers are done with it, its V codes once
    // every producer has decoded them (they all take part in this barrier).
    if (Bars::refilled(tile - 1, tiles)) barrier_sync(Bars::codes_free((tile - 1) % Cfg::kStages), Cfg::kThreads);
    issue(tile + Cfg::kStages - 1);
  }
}

// One warp of a consumer warpgroup: its 16 query rows of the group's 64 (the softmax state of FragmentRows).
template <class Cfg>
struct WarpgroupAttention : FragmentRows<Cfg::kHeadDim / 8> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  using FragmentRows<kD / 8>::o;
  uint64_t q_desc;  // the group's 64 rows of Q codes

  // Starts S = Q K^T for the slot's tile (one commit group). K-major code tiles: 8-row groups 8 * kD bytes
  // apart; a k32 step is 32 bytes, 2 descriptor units.
  __device__ void issue_scores(float (&s)[kN / 8][4], const WgmmaSmem<Cfg>& smem, int slot) {
    const uint64_t k_desc = smem_descriptor(smem.k_codes(slot), 16, 8 * kD, kD);
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks) wgmma_m64n128k32_e4m3(s, q_desc + 2 * ks, k_desc + 2 * ks, ks > 0);
    wgmma_commit();
  }

  // Starts O += P V for the slot's tile (one commit group). N-major V panels: 128-byte rows of 64 dims, panels
  // kPanelBytes apart, 8-key groups 1024 bytes apart; a k16 step is 16 keys = 2048 bytes, 128 descriptor units.
  __device__ void issue_output(const uint32_t (&a)[kN / 16][4], const WgmmaSmem<Cfg>& smem, int slot) {
    const uint64_t v_desc = smem_descriptor(smem.v_halves(slot), Cfg::kPanelBytes, 1024, 128);
#pragma unroll
    for (int kt = 0; kt < kN / 16; ++kt) wgmma_f16_rs(o, a[kt], v_desc + 128 * kt);
    wgmma_commit();
  }
};

// The two consumer groups take turns issuing their wgmma batches (TURN barriers), so that one group's softmax
// runs while the other's matrix products occupy the tensor cores. Within a group, tile t's Q K^T is issued
// together with tile t - 1's P V, and the softmax of tile t runs while that P V is still in flight. A group
// issues tiles + 1 batches: S(0); S(t) + PV(t - 1) for t >= 1; PV(last).
// P is packed into the A fragments, and O rescaled, only after the next FULL barrier: ptxas moves a wgmma wait
// up to the first instruction that writes registers the tensor cores still read, and packing right after the
// softmax put that wait before the exponentials (seen in the SASS, nvcc 13.0), serializing softmax and P V.
template <class Cfg, typename OutT>
__device__ __forceinline__ void consume_tiles(const WgmmaSmem<Cfg>& smem, const AttentionParams& p,
                                              const HeadCoords& c, int row0, int tiles) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;
  WarpgroupAttention<Cfg> w;
  w.start(p, c, row0, warp, lane);  // the producers flip Q's sign when the scale is negative
  w.q_desc = smem_descriptor(smem.q() + group * 64 * Cfg::kHeadDim, 16, 8 * Cfg::kHeadDim, Cfg::kHeadDim);
  auto take_turn = [&] { barrier_sync(Bars::turn(group), Bars::kGroupPair); };
  auto pass_turn = [&] { barrier_arrive(Bars::turn(1 - group), Bars::kGroupPair); };
  if (group == 1) pass_turn();  // group 0 issues first

  float s[kN / 8][4];      // S of the current tile, then its P (fp32)
  uint32_t a[kN / 16][4];  // P of the previous tile as fp16 A fragments, read by its P V
  float correction[2];     // rescales O before the previous tile's P V adds to it
  // Waits for the P V of tile `done` (it reads a and accumulates into o), frees its fp16 V, then packs P of the
  // newest softmax into a and rescales o for it.
  auto pack_previous = [&](int done) {
    wgmma_wait<0>();
    pin_registers(w.o);
    pin_registers(a);
    if (Bars::refilled(done, tiles)) barrier_arrive(Bars::halves_free(done % Cfg::kStages), Cfg::kThreads);
#pragma unroll
    for (int kt = 0; kt < kN / 16; ++kt) p_fragment(a[kt], s, kt);
    rescale_rows(w.o, correction);
    pin_registers(a);
    pin_registers(w.o);
  };
  barrier_sync(Bars::full(0, group), Bars::kGroupPair);
  take_turn();
  wgmma_fence();
  w.issue_scores(s, smem, 0);
  pass_turn();
  wgmma_wait<0>();
  pin_registers(s);
  if (Bars::refilled(0, tiles)) barrier_arrive(Bars::codes_free(0), Cfg::kThreads);
  w.scores_to_probabilities(s, 0, p, lane, correction);

  for (int tile = 1; tile < tiles; ++tile) {
    const int slot = tile % Cfg::kStages, previous = (tile - 1) % Cfg::kStages;
    barrier_sync(Bars::full(slot, group), Bars::kGroupPair);
    pack_previous(tile - 2);
    take_turn();
    wgmma_fence();
    w.issue_scores(s, smem, slot);
    w.issue_output(a, smem, previous);
    pass_turn();
    wgmma_wait<1>();  // S of this tile; P V of the previous one may still run
    pin_registers(s);
    if (Bars::refilled(tile, tiles)) barrier_arrive(Bars::codes_free(slot), Cfg::kThreads);
    w.scores_to_probabilities(s, tile * kN, p, lane, correction);
    pin_registers(s);
  }

  pack_previous(tiles - 2);
  take_turn();
  wgmma_fence();
  w.issue_output(a, smem, (tiles - 1) % Cfg::kStages);
  if (group == 0) pass_turn();  // group 1 takes its last turn after this; nobody waits for one more
  wgmma_wait<0>();
  pin_registers(w.o);
  pin_registers(a);
  w.template store_output<OutT>(p, c, lane);
}

template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    attention_wgmma_kernel(const AttentionParams p, const __grid_constant__ WgmmaMaps maps) {
#if SDPA_HAS_SM90A
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const WgmmaSmem<Cfg> smem{smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024};
  const int blocks_per_head = (p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  const HeadCoords c = p.is_causal ? head_coords_heavy_first(p, blocks_per_head) : head_coords(p, blocks_per_head);
  const int row0 = c.tile * Cfg::kBlockM;
  const int tiles = (key_end(p, row0, Cfg::kBlockM) + Cfg::kBlockN - 1) / Cfg::kBlockN;
  if (threadIdx.x >= Cfg::kConsumerThreads) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    produce_tiles<Cfg>(smem, maps, c, row0, tiles, ScoreScale(p, c).flip_q);
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    consume_tiles<Cfg, OutT>(smem, p, c, row0, tiles);
  }
#else
  __trap();  // built for sm_90a only; the host launches it on sm_90 only
#endif
}

// Encodes the three TMA descriptors (attention_wgmma.cu); fails for strides the TMA cannot express.
cudaError_t make_wgmma_maps(const AttentionParams& p, int q_rows, int kv_rows, WgmmaMaps* maps);

template <int kStages>
struct WgmmaVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    using Cfg = WgmmaConfig<kHeadDim, kStages>;
    WgmmaMaps maps;
    if (cudaError_t err = make_wgmma_maps(p, Cfg::kBlockM, Cfg::kBlockN, &maps); err != cudaSuccess) return err;
    const int blocks_per_head = (p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
    return launch_with_smem(attention_wgmma_kernel<Cfg, OutT>,
                            static_cast<int64_t>(blocks_per_head) * p.batch * p.heads_q, Cfg::kThreads,
                            Cfg::kSmemBytes, stream, p, maps);
  }
};

}  // namespace sdpa
