// Thin wrappers over Hopper's own instructions (sm_90a): wgmma with its fences and shared-memory matrix
// descriptors, the tensor memory accelerator (TMA) with mbarriers, and setmaxnreg. Everything here exists only in
// the sm_90a target; other targets compile the wrappers to nothing or a trap, and the host never launches a
// kernel that uses them below sm_90.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <type_traits>

#include "../common/ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SDPA_HAS_SM90A 1
#else
#define SDPA_HAS_SM90A 0
#endif

namespace sdpa {

// The 64-bit shared-memory matrix descriptor of wgmma: start address, leading and stride byte offsets (all in
// 16-byte units) and the swizzle mode of the canonical layout (64- or 128-byte XOR swizzle). The swizzle is a
// function of the absolute shared-memory address, so swizzled tiles start on 1024-byte boundaries.
// Built in two words, descriptor_low | descriptor_high: the high word (stride and swizzle) is a constant of the
// layout, so the kernels keep only the low words (start address and leading offset) in registers and OR the
// constant in at each wgmma.
__host__ __device__ constexpr uint64_t descriptor_high(uint32_t stride_bytes, int swizzle_bytes) {
  return static_cast<uint64_t>(stride_bytes >> 4) << 32 | static_cast<uint64_t>(swizzle_bytes == 128 ? 1 : 2) << 62;
}
__device__ __forceinline__ uint32_t descriptor_low(const void* start, uint32_t leading_bytes) {
  return (smem_address(start) & 0x3FFFF) >> 4 | (leading_bytes >> 4) << 16;
}

__device__ __forceinline__ void wgmma_fence() {
#if SDPA_HAS_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if SDPA_HAS_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if SDPA_HAS_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Generic-proxy writes to shared memory (st.shared, cp.async) become visible to wgmma's reads only after this
// fence in the writing thread, before the barrier that hands the tile over.
__device__ __forceinline__ void fence_proxy_async() {
#if SDPA_HAS_SM90A
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The same between generic accesses to global memory and TMA copies: a TMA load of data that another block wrote
// with plain stores needs it after the acquire that saw the data published (and the writers before their release).
__device__ __forceinline__ void fence_proxy_async_global() {
#if SDPA_HAS_SM90A
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// mbarrier: a shared-memory barrier whose phase completes when `count` threads arrived and the transaction bytes
// they announced have landed (TMA copies count their bytes down on it).
__device__ __forceinline__ void mbarrier_init(const void* bar, int count) {
#if SDPA_HAS_SM90A
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
#endif
}
// Makes initialized mbarriers visible to the TMA unit (the async proxy); then a barrier among the users.
__device__ __forceinline__ void fence_mbarrier_init() {
#if SDPA_HAS_SM90A
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(const void* bar, int bytes) {
#if SDPA_HAS_SM90A
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
#endif
}
// Blocks until the phase with this parity (0, 1, 0, ... for successive uses) has completed.
__device__ __forceinline__ void mbarrier_wait(const void* bar, int parity) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
#endif
}

// The shared::cluster address of the variable at `p` in block `rank` of the cluster (its own shared memory or
// another block's).
__device__ __forceinline__ uint32_t cluster_shared_address(const void* p, int rank) {
  uint32_t address = 0;
#if SDPA_HAS_SM90A
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(address) : "r"(smem_address(p)), "r"(rank));
#endif
  return address;
}
// Stores 4 bytes at a shared::cluster address (cluster_shared_address) and counts them down on the mbarrier at
// `bar`, in the same block as the destination: the receiver learns of the store by its mbarrier, with no barrier
// across the cluster.
__device__ __forceinline__ void store_async_counted(uint32_t address, uint32_t value, uint32_t bar) {
#if SDPA_HAS_SM90A
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(address),
               "r"(value), "r"(bar)
               : "memory");
#endif
}

// TMA: copies the box of a 4-D tensor map at coordinates (c0 innermost ... c3) into shared memory (laid out and
// swizzled as the map says; elements outside the tensor read as zero) and counts the bytes down on `bar`.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap& map, int c0, int c1, int c2, int c3,
                                            const void* bar) {
#if SDPA_HAS_SM90A
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_address(bar))
      : "memory");
#endif
}

// Moves registers between warpgroups; needs a register cap at kernel entry (__launch_bounds__(threads, 1)).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
#if SDPA_HAS_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
#if SDPA_HAS_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// Pins wgmma's register operands at this point of the instruction stream: the compiler sees them only when the
// wgmma is issued, so without this it could read accumulators before wgmma_wait, or hand the registers of A
// fragments that a wgmma in flight still reads to other values.
template <typename T, int kRows, int kCols>
__device__ __forceinline__ void pin_registers(T (&r)[kRows][kCols]) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint32_t>, "accumulators or A fragments");
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if constexpr (std::is_same_v<T, float>) {
        asm volatile("" : "+f"(r[i][j])::"memory");
      } else {
        asm volatile("" : "+r"(r[i][j])::"memory");
      }
    }
  }
}

// dst = src by an instruction that also reads dst, so that ptxas sees the new value of an A fragment defined here,
// after the wait for the wgmma that read the old one. With a plain copy ptxas forwarded src into the next wgmma,
// counted that input as written while the previous wgmma was still in flight, and serialized every wgmma of the
// kernel (C7513, nvcc 13.0).
template <int kRows, int kCols>
__device__ __forceinline__ void replace_fragments(uint32_t (&dst)[kRows][kCols], const uint32_t (&src)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) dst[i][j] = __byte_perm(dst[i][j], src[i][j], 0x7654);  // bytes 4-7: all src
  }
}

// The m64nN accumulators of a warpgroup, as this thread's N / 8 n-tiles of the mma.sync C layout: the warp's
// 16 rows, lane l holding rows l / 4 and l / 4 + 8 at columns 2 (l % 4) and 2 (l % 4) + 1 of each 8 columns.
#define SDPA_ACC_TILE(d, t) "+f"(d[t][0]), "+f"(d[t][1]), "+f"(d[t][2]), "+f"(d[t][3])
#define SDPA_ACC_TILES_8_AT(d, t0)                                                                                 \
  SDPA_ACC_TILE(d, t0), SDPA_ACC_TILE(d, t0 + 1), SDPA_ACC_TILE(d, t0 + 2), SDPA_ACC_TILE(d, t0 + 3),             \
      SDPA_ACC_TILE(d, t0 + 4), SDPA_ACC_TILE(d, t0 + 5), SDPA_ACC_TILE(d, t0 + 6), SDPA_ACC_TILE(d, t0 + 7)
#define SDPA_ACC_TILES_0_7(d) SDPA_ACC_TILES_8_AT(d, 0)
#define SDPA_ACC_TILES_8_15(d) SDPA_ACC_TILES_8_AT(d, 8)
#define SDPA_ACC_TILES_0_3(d) SDPA_ACC_TILE(d, 0), SDPA_ACC_TILE(d, 1), SDPA_ACC_TILE(d, 2), SDPA_ACC_TILE(d, 3)
#define SDPA_ACC_16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define SDPA_ACC_32                                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"
#define SDPA_ACC_64                                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define SDPA_ACC_128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
  "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, " \
  "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, " \
  "%89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, " \
  "%127}"

// D (64 x N, fp32) = A B (+ D when accumulate): A 64 x 32 E4M3 codes from registers (each warp's 16 rows as the
// mma.sync m16n8k32 A fragment), B 32 x N codes K-major in shared memory. Products of E4M3 values are exact;
// the Hopper FP8 tensor cores sum them with about 14 significant bits (attention_wgmma.cuh).
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " SDPA_ACC_32 ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : SDPA_ACC_TILES_0_7(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  __trap();
#endif
}
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " SDPA_ACC_64 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : SDPA_ACC_TILES_0_7(d), SDPA_ACC_TILES_8_15(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  __trap();
#endif
}

// D (64 x N, fp32) = A B (+ D when accumulate): A 64 x 16 fp16 from registers (the mma.sync m16n8k16 A fragment
// of each warp's 16 rows), B 16 x N fp16 from shared memory, K-major or, with kTransposeB, N-major.
template <bool kTransposeB>
__device__ __forceinline__ void wgmma_f16_rs(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " SDPA_ACC_16 ", {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
      : SDPA_ACC_TILES_0_3(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransposeB ? 1 : 0));
#else
  __trap();
#endif
}
template <bool kTransposeB>
__device__ __forceinline__ void wgmma_f16_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " SDPA_ACC_32 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : SDPA_ACC_TILES_0_7(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransposeB ? 1 : 0));
#else
  __trap();
#endif
}
template <bool kTransposeB>
__device__ __forceinline__ void wgmma_f16_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " SDPA_ACC_64 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : SDPA_ACC_TILES_0_7(d), SDPA_ACC_TILES_8_15(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransposeB ? 1 : 0));
#else
  __trap();
#endif
}

template <bool kTransposeB>
__device__ __forceinline__ void wgmma_f16_rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " SDPA_ACC_128
      ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
      : SDPA_ACC_TILES_8_AT(d, 0), SDPA_ACC_TILES_8_AT(d, 8), SDPA_ACC_TILES_8_AT(d, 16), SDPA_ACC_TILES_8_AT(d, 24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransposeB ? 1 : 0));
#else
  __trap();
#endif
}

// D (64 x N, fp32) = A B (+ D when accumulate): A 64 x 16 and B 16 x N fp16, both K-major in shared memory.
__device__ __forceinline__ void wgmma_f16_ss(float (&d)[8][4], uint64_t a, uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " SDPA_ACC_32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : SDPA_ACC_TILES_0_7(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  __trap();
#endif
}
__device__ __forceinline__ void wgmma_f16_ss(float (&d)[16][4], uint64_t a, uint64_t b, bool accumulate) {
#if SDPA_HAS_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " SDPA_ACC_64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : SDPA_ACC_TILES_0_7(d), SDPA_ACC_TILES_8_15(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#else
  __trap();
#endif
}

#undef SDPA_ACC_TILE
#undef SDPA_ACC_TILES_0_3
#undef SDPA_ACC_TILES_0_7
#undef SDPA_ACC_TILES_8_15
#undef SDPA_ACC_TILES_8_AT
#undef SDPA_ACC_128
#undef SDPA_ACC_16
#undef SDPA_ACC_32
#undef SDPA_ACC_64

}  // namespace sdpa
