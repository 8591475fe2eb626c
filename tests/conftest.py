"""Devices, the CUDA skip rule and the error log that scripts/gpu_check.sh summarizes."""

import json
import os

import pytest
import torch

import sdpa_ext  # noqa: F401  (registers torch.ops.sdpa)


def cuda_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    if not torch._C._dispatch_has_kernel_for_dispatch_key("sdpa::fp8_forward", "CUDA"):
        return "sdpa_ext was built without its CUDA part (torch without CUDA, or no nvcc)"
    return None


CUDA_SKIP = cuda_skip_reason()
requires_cuda = pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda, requires_cuda]),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


_ERRORS = []


@pytest.fixture
def record_error(request):
    """Logs one measured error so the GPU check can report the worst case per reference."""

    def record(reference, **metrics):
        _ERRORS.append({"test": request.node.nodeid, "reference": reference, **metrics})

    return record


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("SDPA_ERROR_LOG")
    if path:
        with open(path, "w") as f:
            json.dump(_ERRORS, f)
