"""The kernel variants built into sdpa_ext._C, in ladder order (DESIGN.md section 4).

A variant is selected by name, optionally with toggles joined by '+', in any order: "pipe3+swizzle",
"warp_spec+2producers+swizzle". `variant_names()` lists every built combination. Besides the names,
variant="auto" picks the fastest variant of the full tier for the inputs and the GPU, and variant="fast" the
fastest of all, the fast tier included.
"""

import itertools
from dataclasses import dataclass
from typing import List, Optional, Tuple

ALL_ARCHS = ("sm_80", "sm_89", "sm_90")
FP8_ARCHS = ("sm_89", "sm_90")  # FP8 mma.sync
HOPPER_ARCHS = ("sm_90",)  # wgmma, built as sm_90a
HEAD_DIMS = (64, 128)
WIDE_HEAD_DIMS = (64, 128, 256)  # the scalar, mma.sync and decode families, and wgmma+predecode
TIERS = {
    "full": "the numerics contract of DESIGN.md section 2: exact products, q k^T, softmax and P v accumulated in "
            "fp32, P in fp16 or fp32; variant='auto' picks among these",
    "fast": "opt-in (variant='fast' or by name): arithmetic below that contract, such as P cast to FP8 or the "
            "Hopper FP8 tensor cores' sums, which keep about 14 significant bits instead of fp32's 24",
}


@dataclass(frozen=True)
class Variant:
    name: str
    stage: int
    tier: str  # a key of TIERS
    toggles: Tuple[str, ...]  # each may be added with '+', in any combination
    description: str
    archs: Tuple[str, ...] = ALL_ARCHS
    head_dims: Tuple[int, ...] = HEAD_DIMS
    aligned_rows: bool = False  # needs q/k/v rows 16-byte aligned (data_ptr and strides); 'auto' falls back
    wide_builds: Tuple[str, ...] = ()  # builds that take WIDE_HEAD_DIMS where head_dims does not
    bare: bool = True  # the base name is built on its own, not only with a toggle

    def builds(self) -> List[str]:
        """Every built name: the base name (if bare), then each subset of toggles in sorted order."""
        toggles = sorted(self.toggles)
        return ["+".join((self.name, *combo)) for n in range(0 if self.bare else 1, len(toggles) + 1)
                for combo in itertools.combinations(toggles, n)]

    def build_head_dims(self, build: str) -> Tuple[int, ...]:
        """The head dims one of builds() takes."""
        return WIDE_HEAD_DIMS if build in self.wide_builds else self.head_dims


_VARIANTS = (
    Variant("scalar", 0, "full", (), "FMA loops over tiles decoded into shared memory, online softmax in fp32; "
            "the readable baseline", head_dims=WIDE_HEAD_DIMS),
    Variant("cp_async", 1, "full", (), "scalar math; K/V code tiles double-buffered with cp.async so tile j+1 "
            "loads while tile j computes", aligned_rows=True),
    Variant("wmma", 2, "full", (), "tensor cores via WMMA 16x16x16 (fp16 after exact decode) for QK^T and PV; "
            "S, P and the O rescale staged in shared memory"),
    Variant("fused_softmax", 3, "full", ("swizzle",), "FlashAttention-2 style mma.sync m16n8k16: S, softmax and P "
            "in registers, P re-packed as the A operand of PV; cp.async double buffer (32-key tiles at D = 256)",
            aligned_rows=True, head_dims=WIDE_HEAD_DIMS),
    Variant("pipe3", 4, "full", ("swizzle",), "fused_softmax with a three-stage cp.async ring for K/V",
            aligned_rows=True, head_dims=WIDE_HEAD_DIMS),
    Variant("warp_spec", 5, "full", ("2producers", "swizzle"), "one (or with 2producers two) producer warps load "
            "and decode K/V into a 2-stage ring, four consumer warps compute; named-barrier handoff",
            aligned_rows=True, head_dims=WIDE_HEAD_DIMS),
    Variant("fp8_mma", 6, "full", ("fp8_pv",), "native FP8 mma.sync m16n8k32 on the raw E4M3 codes for QK^T (on "
            "sm_90, where that instruction is fp16 HMMA on converted codes, Q converted once and the fp16 halves "
            "chained), V decoded in registers (ldmatrix.trans + byte permute + cvt) for an fp16 PV; no decode pass; "
            "64-row query tiles",
            archs=FP8_ARCHS, aligned_rows=True),
    Variant("fp8_mma_m32", 6, "full", (), "fp8_mma with 32-row query tiles (2 warps): twice the blocks for small "
            "batches", archs=FP8_ARCHS, aligned_rows=True),
    Variant("fp8_mma_m16", 6, "full", (), "fp8_mma with 16-row query tiles (1 warp): four times the blocks",
            archs=FP8_ARCHS, aligned_rows=True),
    Variant("fp8_split", 6, "full", (), "fp8_mma with the keys split four ways across the 8 warps of a 32-row block "
            "(a cp.async ring per split) and the partial rows merged in shared memory: more warps in flight for "
            "grids that do not fill the GPU", archs=FP8_ARCHS, aligned_rows=True),
    Variant("wgmma", 7, "full", ("predecode",), "Hopper warpgroup MMA: a producer warpgroup (TMA ring of 3 slots) decodes K "
            "and V to fp16 (exact); two consumer warpgroups of 64 query rows hold Q as fp16 register fragments and "
            "run fp16 wgmma for QK^T (fp32 sums), the register softmax (guessing that the row max stays) while the "
            "previous tile's fp16 wgmma PV (P from registers) still runs, taking turns on the tensor cores",
            archs=HOPPER_ARCHS, aligned_rows=True, wide_builds=("wgmma+predecode",)),
    Variant("wgmma_m192", 7, "full", (), "wgmma with 192-row query tiles at D = 64: three consumer warpgroups "
            "(no turns; 160 registers each, so Q is an fp16 tile in shared memory that wgmma reads), and the last "
            "wave's query tiles split into 64-row units whose three groups share the keys and merge at the end; "
            "each group stops after the key tiles of its own rows (causal diagonals, rows past Sq); "
            "at D = 128 the `wgmma` kernel (three groups do not fit its registers)",
            archs=HOPPER_ARCHS, aligned_rows=True),
    Variant("wgmma_fp8", 7, "fast", ("fp8_pv",), "wgmma with e4m3 wgmma for QK^T straight on the codes (Q codes in "
            "registers, only V decoded); fast tier because the Hopper FP8 tensor cores sum QK^T with about 14 "
            "significant bits (lse off by up to 1.0e-3 at |lse| < 4, 1.5 at |lse| ~ 4000, and 1.2e-3 of |lse| where "
            "every product is positive; fp32 sums stay under 5.6e-4)",
            archs=HOPPER_ARCHS, aligned_rows=True),
    Variant("wgmma_fp8_m64", 7, "fast", ("fp8_pv",), "wgmma_fp8 with 64-row query tiles: one consumer "
            "warpgroup and two blocks per SM, so that one block's start and end overlap the other's key loop "
            "(short heads); 64-key tiles at D = 128", archs=HOPPER_ARCHS, aligned_rows=True),
    Variant("wgmma_fp8_m192", 7, "fast", ("fp8_pv",), "wgmma_fp8+fp8_pv with 192-row query tiles, as "
            "wgmma_m192: three consumer warpgroups of 160 registers (Q codes stay in them), no turns, the last wave "
            "split into 64-row units, each group stopping after its own rows' key tiles; 64-key tiles at D = 128; "
            "V^T from the pass where a kv head has many blocks. Built with fp8_pv only: with fp16 P three groups "
            "spill",
            archs=HOPPER_ARCHS, aligned_rows=True, bare=False),
    Variant("decode", 8, "full", (), "few query rows against many keys (token generation, speculative decoding, a "
            "chunk against a cache): the query heads of a kv head packed into one tile's rows, so K and V are read "
            "once per kv head; the keys split across the GPU (flash-decoding) and merged through their lse; fp16 "
            "mma.sync on codes converted in registers; per-sequence key lengths (seqlens_k); q may be fp16/bf16/fp32, "
            "quantized by the kernel itself (up to 16 rows per head); on sm_90 up to 64 packed rows as 16-row tiles "
            "where the K and V codes fit L2; variant='auto' takes it for up to 16 query rows or with seqlens_k; at "
            "D = 256 16-key tiles and blocks of up to 32 rows", aligned_rows=True,
            head_dims=WIDE_HEAD_DIMS),
    Variant("decode_wgmma", 8, "full", (), "decode whose 64-row blocks (more than 32 packed rows per kv head, e.g. "
            "16 queries of 4 query heads per kv head) run as one warpgroup: each K/V code tile converted once per "
            "block into fp16 tiles, QK^T and PV by fp16 wgmma (fp32 sums) while the next tile converts; blocks of "
            "up to 32 rows, and every block at D = 256, as decode, which also takes up to 64 rows as 16-row tiles "
            "where the K and V codes fit L2; variant='auto' takes it on sm_90",
            archs=HOPPER_ARCHS, aligned_rows=True, head_dims=WIDE_HEAD_DIMS),
)

TOGGLE_DESCRIPTIONS = {
    "swizzle": "XOR-swizzled fp16 K/V tiles (16-byte chunk index ^ row % 8) instead of a plain row-major layout",
    "2producers": "two producer warps instead of one",
    "predecode": "wgmma on fp16 copies of K and V, which TMA loads straight into the ring: a pass over memory "
                 "decodes the first wave's kv heads and the grid's idle producer warps the others, ahead of the "
                 "blocks that read them; no block decodes its own tiles, 128-key tiles at D = 128 (Q kept as codes "
                 "and converted per tile to make room), one producer warp copies; auto takes it at D = 128 from "
                 "2048 query rows per kv head (causal: 4096, or 2048 with 64 kv heads). The Hopper kernel at "
                 "D = 256: 64-key tiles in a ring of two, Q as an fp16 tile in shared memory",
    "fp8_pv": "fast tier: P V on the E4M3 tensor cores too, P scaled by 2^4 and cast to E4M3 (3 mantissa bits: "
              "output SQNR about 31.5 dB against float64 on random inputs, where fp16 P keeps 45-73). wgmma_fp8: V "
              "codes transposed by the producers (ldmatrix/stmatrix) instead of decoded, or by a pass over memory "
              "where a kv head has 32 query blocks or more (128 causal), 9-12% faster than wgmma_fp8 at D = 128 "
              "on an H200, and variant='fast' takes it wherever auto takes wgmma[+predecode] "
              "(wgmma_fp8_m64+fp8_pv on short heads at D = 128: 10-13% faster than wgmma_fp8_m64 on an H100). "
              "fp8_mma (sm_89): mma.sync m16n8k32 e4m3 on the V codes (fp16 mma on converted codes on sm_90, "
              "where ptxas has no e4m3 mma.sync); by name only, not timed on an sm_89 GPU",
}


def variants() -> List[Variant]:
    """Every CUDA variant, with its toggles, tier, supported archs and head dims. variant='auto' picks among them."""
    return list(_VARIANTS)


def variant_names(arch: Optional[str] = None, head_dim: Optional[int] = None) -> List[str]:
    """Every built variant name, toggle combinations included, in ladder order; only those that run on `arch`
    (e.g. "sm_90") and are built for `head_dim` when they are given."""
    return [name for v in _VARIANTS if arch is None or arch in v.archs
            for name in v.builds() if head_dim is None or head_dim in v.build_head_dims(name)]


def device_arch(device=None) -> str:
    """The "sm_XY" name of a CUDA device."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"
