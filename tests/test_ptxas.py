"""Every CUDA kernel compiles for sm_80, sm_89 and sm_90a with no spills, at most 255 registers, and (sm_90a) no
wgmma serialized by ptxas."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("ptxas_report", Path(__file__).parent.parent / "scripts" / "ptxas_report.py")
ptxas_report = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ptxas_report)

pytestmark = pytest.mark.skipif(ptxas_report.find_nvcc() is None, reason="nvcc not found: cannot compile the kernels")


@pytest.fixture(scope="module")
def kernels():
    return ptxas_report.collect()


def test_every_arch_builds_every_attention_kernel(kernels):
    import sdpa_ext

    # One instantiation per built variant, head dim (its head_dims) and output type (fp16, bf16); at D = 128
    # wgmma_m192 launches wgmma's kernels; wgmma_fp8+fp8_pv and wgmma_fp8_m192+fp8_pv have a second kernel at
    # D = 64 and 128 that reads V^T from a pass (transpose_values.h).
    prefill = sum(2 * len(v.build_head_dims(b)) for v in sdpa_ext.variants() if v.stage < 8 for b in v.builds()) - 2
    prefill += 2 * 4
    # The Hopper kernels at D = 64 and 128 once more, for a q that their consumers quantize per 16 rows
    # (WgmmaConfig::kQuantizesQRows), with the same sharing and the same pass kernels.
    prefill += sum(2 * len([d for d in v.build_head_dims(b) if d <= 128]) for v in sdpa_ext.variants()
                   if v.name.startswith("wgmma") for b in v.builds()) - 2 + 2 * 4
    for arch in ptxas_report.DEFAULT_ARCHS:
        names = {k.kernel for k in kernels if k.arch == arch}
        attention = {name for name in names if name.startswith("void attention_")}
        assert len(attention) == prefill, (arch, sorted(attention))
        # decode, per output type: three packed-row widths (16, 32, 64 rows) at D = 64 and 128, two (16, 32) at
        # D = 256; 16 rows also with the deeper rings of sm_90 at every D, 64 rows also by wgmma (decode_wgmma);
        # and the split combine per head dim.
        assert len({n for n in names if n.startswith("void decode_attention_kernel")}) == 2 * (5 + 5 + 3), arch
        assert len({n for n in names if n.startswith("void decode_combine_kernel")}) == 2 * 3, arch


def test_no_spills_and_register_budget(kernels):
    print("\n" + ptxas_report.format_table(kernels))
    assert kernels
    for k in kernels:
        assert k.spill_store_bytes == 0 and k.spill_load_bytes == 0, f"{k.kernel} spills on {k.arch}"
        assert k.registers <= 255, f"{k.kernel} uses {k.registers} registers on {k.arch}"


def test_no_serialized_wgmma(kernels):
    # ptxas makes every wgmma of a kernel wait for the previous one when it cannot prove the register operands of
    # those in flight untouched (a write to them, a wgmma issued under a condition, a wait across loop passes).
    hopper = [k for k in kernels if k.arch == "sm_90a" and "wgmma" in k.kernel.lower()]
    assert hopper
    assert not [k.kernel for k in hopper if k.wgmma_serialized]


def test_dynamic_smem_fits_every_target():
    import sdpa_ext

    sizes = ptxas_report.dynamic_smem(ptxas_report.find_nvcc())
    assert {name for name, _ in sizes} == set(sdpa_ext.variant_names())
    # Shared memory a block may have, per arch (CUDA programming guide, compute capabilities table).
    limit = {"sm_80": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}
    for v in sdpa_ext.variants():
        budget = min(limit[arch] for arch in v.archs)
        for name in v.builds():
            for head_dim in v.build_head_dims(name):
                assert sizes[(name, head_dim)] <= budget, (name, head_dim, sizes[(name, head_dim)], v.archs)
