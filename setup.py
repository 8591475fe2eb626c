"""Builds sdpa_ext._C: the CUDA sources when torch has CUDA and nvcc is found, else the CPU part only."""

import glob
import os
import shutil

from setuptools import setup
from torch.utils import cpp_extension

# Ampere, Ada and Hopper unless the caller narrows it (the GPU check script builds only the GPU's own arch).
# Hopper builds as 9.0a: the `wgmma` variant needs the arch-specific target (wgmma, setmaxnreg), and a plain
# 9.0 in TORCH_CUDA_ARCH_LIST is raised to it.
DEFAULT_CUDA_ARCHS = "8.0;8.9;9.0a"


def hopper_as_sm90a(arch_list):
    return ";".join("9.0a" + arch[3:] if arch.startswith("9.0") and not arch.startswith("9.0a") else arch
                    for arch in arch_list.replace(" ", ";").split(";") if arch)


def find_nvcc():
    cuda_home = cpp_extension.CUDA_HOME
    if cuda_home and os.path.exists(os.path.join(cuda_home, "bin", "nvcc")):
        return os.path.join(cuda_home, "bin", "nvcc")
    return shutil.which("nvcc")


def extension():
    cpu_sources = ["csrc/ops.cpp", *sorted(glob.glob("csrc/cpu/*.cpp"))]
    cxx_flags = ["-O3", "-std=c++17"]
    import torch

    nvcc = find_nvcc()
    if torch.version.cuda is None or nvcc is None:
        reason = "torch has no CUDA" if torch.version.cuda is None else "nvcc not found"
        print(f"sdpa_ext: building the CPU part only ({reason})")
        return cpp_extension.CppExtension("sdpa_ext._C", cpu_sources, extra_compile_args={"cxx": cxx_flags})

    os.environ["TORCH_CUDA_ARCH_LIST"] = hopper_as_sm90a(os.environ.get("TORCH_CUDA_ARCH_LIST", DEFAULT_CUDA_ARCHS))
    print(f"sdpa_ext: building CPU and CUDA parts for TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']}")
    cuda_sources = sorted(glob.glob("csrc/cuda/*.cpp")) + sorted(glob.glob("csrc/kernels/**/*.cu", recursive=True))
    nvcc_flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo"]
    return cpp_extension.CUDAExtension(
        "sdpa_ext._C",
        cpu_sources + cuda_sources,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )


setup(
    ext_modules=[extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
