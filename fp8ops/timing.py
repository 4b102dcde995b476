"""The timing harness shared by the benchmark (``python -m fp8ops.bench``) and the tools in tools/:
CUDA-graph replay of back-to-back calls over rotated inputs (past L2 when they allow), the device
copy rate, the launch floor, and wall-clock medians for the CPU."""

from __future__ import annotations

import math
import statistics
import time

import torch

CALLS_PER_GRAPH = 20


def graph_time_us(fn, arg_sets, replays: int = 30) -> float:
    """Per-call time of CALLS_PER_GRAPH back-to-back calls fn(*arg_sets[i % len(arg_sets)]) captured
    in one CUDA graph: the median replay time divided by the call count (after a warm-up)."""
    calls = [arg_sets[i % len(arg_sets)] for i in range(CALLS_PER_GRAPH)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            for args in calls:
                fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in calls:
            fn(*args)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times) * 1e3 / CALLS_PER_GRAPH


def copy_bandwidth_tbps(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e12


def launch_floor_us() -> float:
    """Per-call time of the smallest kernel (zeroing one float), timed like the ops."""
    buf = torch.zeros(1, device="cuda")
    return graph_time_us(torch.Tensor.zero_, [(buf,)])


def n_sets_for(bytes_per_call: int) -> int:
    """Input sets to rotate through: enough for the graph's inputs to span twice the L2, at most
    CALLS_PER_GRAPH. Inputs under a tenth of the L2 per call therefore stay wholly or partly in L2
    between replays, as a decode step's activations do after the kernel that writes them."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(1, min(CALLS_PER_GRAPH, math.ceil(2 * l2 / max(1, bytes_per_call))))


def tbps(nbytes: int, us: float) -> float:
    """nbytes moved in us microseconds, in TB/s."""
    return nbytes / (us * 1e-6) / 1e12


def pct_of_copy(nbytes: int, us: float, copy_tbps: float) -> float:
    """nbytes moved in us microseconds, as a percentage of the copy rate copy_tbps (TB/s)."""
    return 100.0 * tbps(nbytes, us) / copy_tbps


def wall_median_us(fn, reps: int = 15) -> float:
    """Median wall-clock time of fn() in microseconds, after one warm-up call (CPU timings)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6
