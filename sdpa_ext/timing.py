"""Timers for the benchmark: CUDA events, CUDA-graph replay, and a host clock for the CPU.

Iteration counts adapt to the cost of one call, so that a sweep spends about the same wall time on a 5 us
kernel and a 50 ms one: many calls per graph for small work (launch gaps hidden), few for large.
"""

import math
import shutil
import statistics
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

GRAPH_BUDGET_MS = 2.0    # GPU time one captured graph should take
TOTAL_BUDGET_MS = 300.0  # GPU time all timed repetitions of one row should take


def _summary(samples_us: List[float]) -> Dict[str, float]:
    ordered = sorted(samples_us)
    return {"median_us": statistics.median(ordered), "p90_us": ordered[int(0.9 * (len(ordered) - 1))],
            "samples": len(ordered)}


def time_cpu(fn: Callable[[int], object]) -> Dict[str, float]:
    """Host-clock median of fn(i) on the CPU, 3 to 20 calls after one warm-up call."""
    start = time.perf_counter()
    fn(0)
    iters = max(3, min(20, math.ceil(TOTAL_BUDGET_MS * 1e-3 * 5 / (time.perf_counter() - start))))
    samples = []
    for i in range(iters):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1e6)
    return _summary(samples)


def warm_up_cuda(fn: Callable[[int], object], seconds: float) -> None:
    """Calls fn for `seconds` of wall time, so that the timings after it find the GPU at its sustained clock.

    An idle H200 starts a heavy kernel at 1980 MHz and, once its 700 W power limit engages about a second later,
    runs it at 1600-1800 MHz (nvidia-smi, 4x16x2048x128 attention, 2026-11-22): rows timed during that ramp read
    up to 20% faster than the rows after them.
    """
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds:
        for _ in range(8):
            fn(i)
            i += 1
        torch.cuda.synchronize()


def probe_cuda_us(fn: Callable[[int], object], calls: int = 5) -> float:
    """Per-call time of a warmed-up call with events, the median of `calls`: sizes the timed loops and screens out
    slow rows. One call was not enough: a 368 us host stall in the first row's probe at 1x8x512x64 gave its graph 6
    calls instead of about 40, and the launch of a graph of 6 calls read as 1.0 us more per call (H100, 2026-11-24)."""
    fn(0)
    samples = []
    for i in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i + 1)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def time_cuda_events(fn: Callable[[int], object], call_us: float, warmup: int = 5) -> Dict[str, float]:
    """Per-call CUDA-event times (launch overhead included), median and p90 after warm-up."""
    iters = max(5, min(100, math.ceil(TOTAL_BUDGET_MS * 1e3 / call_us)))
    for i in range(warmup):
        fn(i)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(i)
        ends[i].record()
    torch.cuda.synchronize()
    return _summary([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def time_cuda_graph(fn: Callable[[int], object], call_us: float) -> Dict[str, float]:
    """GPU time per call from replaying a graph of consecutive calls (launch gaps mostly removed)."""
    calls = max(1, min(50, math.ceil(GRAPH_BUDGET_MS * 1e3 / call_us)))
    replays = max(5, min(20, math.ceil(TOTAL_BUDGET_MS * 1e3 / (calls * call_us))))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    return {**_summary(samples), "calls_per_graph": calls}


def kernel_device_us(fn: Callable[[int], object], calls: int = 20) -> Dict[str, float]:
    """Mean device microseconds per call of every kernel fn launches, by kernel name (torch.profiler, CUPTI), after 3
    calls of warm-up. A kernel that starts early under programmatic dependent launch (the Hopper attention kernels
    after the quantizer) counts its wait for the kernel before it too, so shares of one call can add up to more than
    its graph time."""
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
    totals: Dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time / calls
    return totals


def parse_clock_power(line: str) -> Optional[Tuple[float, float]]:
    """(SM MHz, board W) from a line of `nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits`,
    or None for anything else ("[N/A]", an empty line)."""
    try:
        mhz, watts = (float(field) for field in line.split(","))
    except ValueError:
        return None
    return mhz, watts


def nvidia_smi_id(device_index: int) -> str:
    """The GPU that torch calls cuda:device_index, as nvidia-smi -i names it: by UUID, since torch counts only the
    GPUs that CUDA_VISIBLE_DEVICES leaves, in its order, and nvidia-smi counts all of them."""
    uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else str(device_index)


class ClockSampler:
    """Samples the GPU's SM clock and board power every 100 ms (nvidia-smi) while the `with` block runs.

    Under its power limit a GPU clocks each kernel by the power that kernel draws: an H200 at 700 W ran fp16
    attention at 4x16x2048x128 at 1590 MHz (cuDNN) and the FP8 kernels at 1770-1845 MHz (2026-11-22), so a time
    means little without the clock it ran at. `result()` is the medians, or None without nvidia-smi or samples.
    """

    def __init__(self, device_index: int):
        self.gpu_id = nvidia_smi_id(device_index)
        self.samples: List[Tuple[float, float]] = []
        self.process = None
        self.reader = None

    def __enter__(self):
        if shutil.which("nvidia-smi") is None:
            return self
        self.process = subprocess.Popen(
            ["nvidia-smi", "-i", self.gpu_id, "--query-gpu=clocks.sm,power.draw",
             "--format=csv,noheader,nounits", "-lms", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self):
        for line in self.process.stdout:
            sample = parse_clock_power(line)
            if sample is not None:
                self.samples.append(sample)

    def __exit__(self, *exc):
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
            self.reader.join()
        return False

    def result(self) -> Optional[Dict[str, float]]:
        if not self.samples:
            return None
        return {"sm_mhz": statistics.median(s[0] for s in self.samples),
                "power_w": statistics.median(s[1] for s in self.samples)}
