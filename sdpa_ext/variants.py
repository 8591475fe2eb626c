"""The kernel variants built into sdpa_ext._C, in ladder order (DESIGN.md section 4)."""

from dataclasses import dataclass, field
from typing import List, Tuple


@dataclass(frozen=True)
class Variant:
    name: str
    stage: int
    tier: str  # "full": P stays in fp16/fp32 (auto picks among these); "fast": P cast to FP8 (opt-in)
    archs: Tuple[str, ...]
    head_dims: Tuple[int, ...]
    description: str
    toggles: Tuple[str, ...] = field(default_factory=tuple)


_VARIANTS = (
    Variant(
        name="scalar",
        stage=0,
        tier="full",
        archs=("sm_80", "sm_89", "sm_90"),
        head_dims=(64, 128),
        description="FMA loops over decoded tiles in shared memory, online softmax in fp32; the readable baseline",
    ),
)


def variants() -> List[Variant]:
    """Every CUDA variant, with its tier, supported archs and head dims. variant='auto' picks among them."""
    return list(_VARIANTS)


def variant_names() -> List[str]:
    return [v.name for v in _VARIANTS]
