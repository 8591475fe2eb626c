"""Timers for the benchmark: CUDA events, CUDA-graph replay, and a host clock for the CPU."""

import statistics
import time
from typing import Callable, Dict, List

import torch


def _summary(samples_us: List[float]) -> Dict[str, float]:
    ordered = sorted(samples_us)
    return {"median_us": statistics.median(ordered), "p90_us": ordered[int(0.9 * (len(ordered) - 1))]}


def time_cpu(fn: Callable[[int], object], iters: int = 20, warmup: int = 3) -> Dict[str, float]:
    """Host-clock median of fn(i) on the CPU."""
    for i in range(warmup):
        fn(i)
    samples = []
    for i in range(iters):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1e6)
    return _summary(samples)


def time_cuda_events(fn: Callable[[int], object], iters: int = 100, warmup: int = 10) -> Dict[str, float]:
    """Per-call CUDA-event times (launch overhead included), median and p90 after warm-up."""
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


def time_cuda_graph(fn: Callable[[int], object], calls: int = 50, replays: int = 20) -> Dict[str, float]:
    """GPU time per call from replaying a graph of `calls` consecutive calls (launch gaps mostly removed)."""
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
    return _summary(samples)
