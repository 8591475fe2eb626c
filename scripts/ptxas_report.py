#!/usr/bin/env python3
"""Compiles every CUDA source under csrc/kernels with nvcc alone (no torch) and reports per-kernel resources.

    python scripts/ptxas_report.py [--arch sm_89 --arch sm_90a]

Prints registers, static shared memory, stack frame and spills for every kernel instantiation and arch, and the
dynamic shared memory each variant launches with (from scripts/smem_sizes.cu, run on the host).
tests/test_ptxas.py runs the same compile in CI and fails on any spill or on more than 255 registers.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent.parent / "csrc" / "kernels"
# Hopper builds as sm_90a: wgmma and setmaxnreg exist only in the arch-specific target.
DEFAULT_ARCHS = ("sm_80", "sm_89", "sm_90a")
# The defines are torch's for every extension build (torch.utils.cpp_extension): without them a conversion that the
# real build rejects (a float into __half) compiled here.
NVCC_FLAGS = ["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-D__CUDA_NO_HALF_OPERATORS__",
              "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
              "-Xptxas", "-v", "-c", "-o", "/dev/null"]

_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_CAST = re.compile(r"\((?:unsigned )?(?:int|long|bool)\)")
_USAGE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
# ptxas's advisory when it makes every wgmma of a function wait for the previous one (C7510-C7515).
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized .* in the function '(\S+)'")


@dataclass
class KernelResources:
    source: str
    arch: str
    kernel: str
    registers: int = 0
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    wgmma_serialized: bool = False


def find_nvcc():
    return shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")


def demangle(names, nvcc):
    beside_nvcc = Path(nvcc).parent / "cu++filt"
    tool = shutil.which("cu++filt") or (str(beside_nvcc) if beside_nvcc.exists() else shutil.which("c++filt"))
    if not tool or not names:
        raise FileNotFoundError("no demangler (cu++filt or c++filt) found")
    result = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def parse_ptxas(source, text):
    kernels, current = [], None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = KernelResources(source=source, arch=m.group(2), kernel=m.group(1))
            kernels.append(current)
        elif current and (m := _PROPS.search(line)):
            current.stack_bytes, current.spill_store_bytes, current.spill_load_bytes = map(int, m.groups())
        elif current and (m := _USAGE.search(line)):
            current.registers = int(m.group(1))
            current.smem_bytes = int(m.group(2) or 0)
    serialized = set(_SERIALIZED.findall(text))
    for k in kernels:
        k.wgmma_serialized = k.kernel in serialized
    return kernels


def compile_one(nvcc, source, arch):
    number = arch.removeprefix("sm_")
    cmd = [nvcc, f"-gencode=arch=compute_{number},code={arch}", *NVCC_FLAGS, str(source)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed for {source.name} ({arch}):\n{result.stderr}")
    return parse_ptxas(source.name, result.stderr)


def collect(archs=DEFAULT_ARCHS, nvcc=None, jobs=2):
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found")
    sources = sorted(KERNEL_DIR.rglob("*.cu"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        parts = pool.map(lambda job: compile_one(nvcc, *job), [(s, a) for s in sources for a in archs])
        kernels = [k for part in parts for k in part]
    for k, name in zip(kernels, demangle([k.kernel for k in kernels], nvcc)):
        # cu++filt writes template integers as "(int)64", c++filt as "64": keep the plain form.
        k.kernel = _CAST.sub("", name.replace("sdpa::", "").replace("(anonymous namespace)::", ""))
    return kernels


def dynamic_smem(nvcc):
    """{(variant, head_dim): bytes} of dynamic shared memory, from scripts/smem_sizes.cu run on the host."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "smem_sizes"
        build = [nvcc, "-std=c++17", "--expt-relaxed-constexpr", str(Path(__file__).parent / "smem_sizes.cu"),
                 "-o", str(exe)]
        subprocess.run(build, check=True, capture_output=True, text=True)
        lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    return {(name, int(d)): int(b) for name, d, b in (line.split() for line in lines if line)}


def format_smem(sizes, limit_bytes=99 * 1024):
    head_dims = sorted({d for _, d in sizes})
    rows = ["| variant | " + " | ".join(f"D={d} dynamic smem (B)" for d in head_dims) + " |",
            "|---" * (len(head_dims) + 1) + "|"]
    for name in dict.fromkeys(n for n, _ in sizes):
        cells = [("-" if (name, d) not in sizes else
                  f"{sizes[(name, d)]}" + (" (over sm_89's 99 KB)" if sizes[(name, d)] > limit_bytes else ""))
                 for d in head_dims]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def format_table(kernels):
    rows = ["| arch | kernel | registers | smem (B) | stack (B) | spill st/ld (B) |", "|---|---|---|---|---|---|"]
    for k in sorted(kernels, key=lambda k: (k.arch, k.kernel)):
        rows.append(f"| {k.arch} | `{k.kernel}` | {k.registers} | {k.smem_bytes} | {k.stack_bytes} | "
                    f"{k.spill_store_bytes}/{k.spill_load_bytes} |")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", action="append", help="sm_XX (repeatable; default sm_80, sm_89, sm_90a)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    kernels = collect(tuple(args.arch or DEFAULT_ARCHS), jobs=args.jobs)
    print(format_table(kernels))
    print()
    print(format_smem(dynamic_smem(find_nvcc())))
    bad = [k for k in kernels if k.spill_store_bytes or k.spill_load_bytes or k.registers > 255]
    if bad:
        print(f"{len(bad)} kernel(s) spill or use more than 255 registers", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
