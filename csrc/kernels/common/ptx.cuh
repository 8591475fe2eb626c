// Thin wrappers over the PTX instructions the tensor-core variants use (sm_80 and later).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace sdpa {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses registers; src_bytes = 0 writes zeros (rows past the end).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
// One 16-byte shared load, kept in order with the other asm here (a cp.async that refills the same bytes comes
// after it). From a uint4 in shared memory read as 16-bit pairs, ptxas made four 4-byte loads.
__device__ __forceinline__ uint4 load_shared_16(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_address(p)));
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Asks L2 for the 128-byte line holding `address`; a hint with no effect on what any load returns, so it may run
// before wait_for_previous_grids (L2 is where the GPU's writes meet).
__device__ __forceinline__ void prefetch_l2(const void* address) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(address));
}

// Programmatic dependent launch (sm_90; no-ops on older archs and in launches that did not allow it). A kernel
// launched by launch_overlapping may start while the kernel before it on the stream is still running: it must
// wait_for_previous_grids() before it reads or writes global memory that kernel touches. allow_next_grid_launch()
// lets the next such kernel start early; that kernel still waits for this one to finish.
__device__ __forceinline__ void wait_for_previous_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_next_grid_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// A thread-block cluster's start (sm_90): a block may write another block's shared memory only once that block has
// started. Every thread of the cluster calls arrive_cluster_start() early and wait_cluster_start() before its first
// write to another block's shared memory, so that the wait finds the other blocks long arrived.
__device__ __forceinline__ void arrive_cluster_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_cluster_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}
// A thread-block cluster's end: a block must not exit while another may still read its shared memory. Every thread
// calls arrive_cluster_done() once it has read the other blocks' shared memory for the last time, and
// wait_cluster_done() before it exits; the work between the two overlaps the other blocks' reads.
__device__ __forceinline__ void arrive_cluster_done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_cluster_done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// A counter in global memory that blocks of one grid hand work over with: the writer adds with release semantics
// (its earlier writes, and those of the threads it synchronized with, become visible first), the reader loads
// with acquire semantics (what it reads after sees them).
__device__ __forceinline__ void add_release_gpu(unsigned* counter, unsigned value) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
}
__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* counter) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// This thread's lane, read afresh where it is used: ptxas cannot keep it in a register across a loop. For the
// masked tiles of `wgmma` at D = 128 it spilled the lane's key offset instead (8 bytes, nvcc 13.0).
__device__ __forceinline__ int lane_now() {
  int lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
}

// `value`, as the compiler must take it to depend on `anchor`: what is derived from it inside a loop where anchor
// changes stays there instead of being hoisted before the loop and kept in registers across it.
__device__ __forceinline__ uint32_t tied_to(uint32_t value, int anchor) {
  asm("" : "+r"(value) : "r"(anchor));
  return value;
}

// Named barriers: `count` threads (a multiple of 32) take part; id 0 is __syncthreads'.
__device__ __forceinline__ void barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Four 8x8 b16 matrices from shared memory; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// Four 8x8 b16 matrices to shared memory; lane i gives the address of row i % 8 of matrix i / 8, and r[j] holds
// matrix j's elements of row lane / 4, columns 2 (lane % 4) and 2 (lane % 4) + 1 (ldmatrix_x4's fragments).
__device__ __forceinline__ void stmatrix_x4(void* row, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_address(row)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// D = A B + D for one 16x8x16 tile: A row-major fp16 (4 regs), B column-major fp16 (2 regs), D fp32 (4 regs).
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two E4M3 codes (low byte first) to two fp16 values; exact (one cvt on sm_89+, emulated on sm_80).
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// The upper two codes (bytes 2 and 3) of a word to two fp16 values. The cvt reads the upper half of the register
// itself; the shift that e4m3x2_to_half2(codes >> 16) compiles to costs one instruction per pair.
__device__ __forceinline__ uint32_t e4m3x2_high_to_half2(uint32_t codes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(h) : "r"(codes));
  return h;
#else
  return e4m3x2_to_half2(static_cast<uint16_t>(codes >> 16));
#endif
}

// The fp16 A fragment (m16n8k16) of one k16 step from its codes (FragmentRows::load_half_q_codes): rows g and
// g + 8, dims 2c, 2c + 1 in the low halves and 2c + 8, 2c + 9 in the high halves of codes[0] and codes[1]. The
// conversions are volatile so that they stay where they are called: codes of Q do not change across a loop, and
// ptxas hoisted the conversions out of it, which kept the fp16 fragments live throughout (a spill).
__device__ __forceinline__ void half_q_fragment(const uint32_t (&codes)[2], uint32_t (&a)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    asm volatile("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
                 : "=r"(a[r]), "=r"(a[r + 2])
                 : "r"(codes[r]));
  }
#else
  a[0] = e4m3x2_to_half2(static_cast<uint16_t>(codes[0] & 0xFFFFu));
  a[1] = e4m3x2_to_half2(static_cast<uint16_t>(codes[1] & 0xFFFFu));
  a[2] = e4m3x2_high_to_half2(codes[0]);
  a[3] = e4m3x2_high_to_half2(codes[1]);
#endif
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// On sm_90 the e4m3 mma.sync is not a tensor-core instruction of its own: ptxas turns it into fp16 HMMA on
// converted codes, converts the A fragments again at every call and adds each k32 product into D with 4 FADDs
// (fp8_split at 1x8x512x64: 64 FADD and 16 conversions of Q per warp and 64-key tile, beside 32 HMMA). There the
// kernels keep A converted and chain the two k16 halves on D themselves; sm_89 runs it natively (QMMA).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define SDPA_E4M3_MMA_AS_FP16 1
#else
#define SDPA_E4M3_MMA_AS_FP16 0
#endif

// An E4M3 A fragment of one m16n8k32 step (4 registers of 4 codes) as the two fp16 A fragments of m16n8k16 steps
// that hold the same values: lo codes 0-1 of each register, hi codes 2-3. Any consistent assignment of k to the
// lanes' bytes gives the same dot products, so each is the A fragment of a k16 step whose B fragments come from the
// same halves of B.
__device__ __forceinline__ void e4m3_fragment_to_halves(const uint32_t (&a)[4], uint32_t (&lo)[4], uint32_t (&hi)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo[i] = e4m3x2_to_half2(static_cast<uint16_t>(a[i] & 0xFFFFu));
    hi[i] = e4m3x2_high_to_half2(a[i]);
  }
}

// D = A B + D for one 16x8x32 step of E4M3 codes by two fp16 m16n8k16 on the converted codes (exact products, fp32
// sums), on any arch: A as e4m3_fragment_to_halves gives it, B 2 regs of 4 codes each.
__device__ __forceinline__ void mma_16x8x32_e4m3_as_half(float (&d)[4], const uint32_t (&a_lo)[4],
                                                         const uint32_t (&a_hi)[4], uint32_t b0, uint32_t b1) {
  mma_16x8x16(d, a_lo, e4m3x2_to_half2(static_cast<uint16_t>(b0 & 0xFFFFu)),
              e4m3x2_to_half2(static_cast<uint16_t>(b1 & 0xFFFFu)));
  mma_16x8x16(d, a_hi, e4m3x2_high_to_half2(b0), e4m3x2_high_to_half2(b1));
}

// The A fragment of one m16n8k32 step of E4M3 codes: regs 0/1 rows g/g+8 at k 4c..4c+3, regs 2/3 at +16 (codes),
// or, where the mma runs as fp16 (SDPA_E4M3_MMA_AS_FP16), the same codes as fp16 pairs (e4m3_fragment_to_halves).
struct E4m3Fragment {
  uint32_t codes[4];
  uint32_t lo[4], hi[4];
  __device__ void set(const uint32_t (&a)[4]) {
#if SDPA_E4M3_MMA_AS_FP16
    e4m3_fragment_to_halves(a, lo, hi);
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) codes[i] = a[i];
#endif
  }
};

// The fp16 form alone, for kernels that run the fp16 mma on every arch (decode).
struct E4m3HalfFragment {
  uint32_t lo[4], hi[4];
  __device__ void set(const uint32_t (&a)[4]) { e4m3_fragment_to_halves(a, lo, hi); }
};

// D = A B + D for one 16x8x32 tile of E4M3 codes (sm_89 and later): B 2 regs of 4 codes each. Products of E4M3
// values are exact and accumulate in fp32. A and B registers with the same index and lane hold the same k
// positions, so any consistent assignment of k to bytes gives the same dot products.
__device__ __forceinline__ void mma_16x8x32_e4m3(float (&d)[4], const E4m3Fragment& a, uint32_t b0, uint32_t b1) {
#if SDPA_E4M3_MMA_AS_FP16
  mma_16x8x32_e4m3_as_half(d, a.lo, a.hi, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.codes[0]), "r"(a.codes[1]), "r"(a.codes[2]), "r"(a.codes[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the host never launches FP8 variants below sm_89
#endif
}

// Four 8x8 b16 matrices, transposed, from shared memory: two of them per 16 keys x 16 dims of V codes.
// Each register then holds codes (key 2c, dims 2g, 2g + 1) and (key 2c + 1, same dims) with c = lane % 4,
// g = lane / 4; `split_key_pairs` turns it into the fp16 B fragments of dims 2g and 2g + 1: one byte permute that
// puts the even-dim pair in the low half and the odd-dim pair in the high half, where the conversion reads either
// (two permutes, one per pair, cost `fp8_split` 32 more instructions per warp and 64-key tile: 4.55-4.63 against
// 4.47-4.53 us at 1x8x512x64 in two runs, 22.43 against 21.52 us at 1x8x512x4096x64, H200).
__device__ __forceinline__ void split_key_pairs(uint32_t codes, uint32_t* even_dim, uint32_t* odd_dim) {
  const uint32_t by_dim = __byte_perm(codes, 0, 0x3120);  // even-dim pair in the low half, odd-dim pair in the high
  *even_dim = e4m3x2_to_half2(static_cast<uint16_t>(by_dim & 0xFFFFu));
  *odd_dim = e4m3x2_high_to_half2(by_dim);
}

// __byte_perm selectors over two such registers, one of keys 0-7 and one of keys 8-15 of a 16-key group: bytes 0
// and 2 of each give the word of dim 2g (kEvenDimKeys), bytes 1 and 3 that of dim 2g + 1 (kOddDimKeys), holding keys
// 2c, 2c + 1, 2c + 8 and 2c + 9: positions 4c..4c + 3 of the E4M3 P fragments (key_of_position). code_tile_pv_e4m3
// multiplies them as m16n8k32 B fragments; transpose_v_tile stores them as rows of V^T.
constexpr uint32_t kEvenDimKeys = 0x6420, kOddDimKeys = 0x7531;

}  // namespace sdpa
