"""Timers: wall clock, CUDA events, CUDA-graph replay, whole child processes. All in seconds.

Every timer returns the samples, not a summary: :func:`benchkit.quantiles` turns them into the
p50/p20/p80 a row reports, and a benchmark may keep them (or interleave providers) as it likes.
torch is imported only by the CUDA timers, so CPU-only benchmarks do not pay for it.
"""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: Bytes zeroed before each call when ``flush_l2`` is set: larger than any current GPU's L2
#: (H100/H200 50 MiB, B200 126 MiB), as triton's ``do_bench`` does.
L2_FLUSH_BYTES = 256 * 2**20


def _positive(name: str, value: int, least: int = 1) -> None:
    if value < least:
        raise ValueError(f"{name}={value}: must be at least {least}")


def wall_times(
    fn: Callable[[], object],
    *,
    reps: int,
    warmup: int = 2,
    calls: int = 1,
    sync: Callable[[], object] | None = None,
) -> list[float]:
    """Seconds per call of ``fn`` by ``time.perf_counter``.

    Args:
        reps: samples to take.
        warmup: untimed calls first (allocator, caches, lazy compilation).
        calls: back-to-back calls per sample; the sample is their mean. Many calls per sample show
            the host cost of a call that launches asynchronous GPU work.
        sync: called before each clock stop (e.g. ``torch.cuda.synchronize``), so queued device
            work counts.
    """
    _positive("reps", reps)
    _positive("calls", calls)
    _positive("warmup", warmup, least=0)
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync is not None:
            sync()
        samples.append((time.perf_counter() - start) / calls)
    return samples


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()``'s result and the wall seconds it took: for a run too long to repeat."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def process_times(cmd: Sequence[str], cwd: Path | str | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + sys) of one child process, start to exit.

    Raises:
        RuntimeError: the process exited non-zero (its output is in the message).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        shown = " ".join(cmd[:4]) + (" ..." if len(cmd) > 4 else "")
        raise RuntimeError(f"{shown} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def cuda_event_times(
    fn: Callable[[], object],
    *,
    reps: int | None = None,
    budget_s: float | None = None,
    warmup: int = 2,
    warmup_s: float | None = None,
    flush_l2: bool = False,
) -> list[float]:
    """Seconds per call of ``fn`` on the current CUDA stream, by a pair of CUDA events per call.

    Args:
        reps: samples to take; or
        budget_s: time about this long in total (the count comes from a 5-call estimate).
        warmup: untimed calls first (0: the first call is timed too); ``warmup_s`` instead warms
            up for about that long.
        flush_l2: zero :data:`L2_FLUSH_BYTES` before each call, so every call starts with a cold
            L2 (the zeroing lies outside the events).
    """
    import torch

    if (reps is None) == (budget_s is None):
        raise ValueError("pass exactly one of reps= and budget_s=")
    _positive("reps", 1 if reps is None else reps)
    _positive("warmup", warmup, least=0)
    cache = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if flush_l2 else None

    def flush() -> None:
        if cache is not None:
            cache.zero_()

    if budget_s is not None or warmup_s is not None:
        fn()  # first call (lazy init, compilation) kept out of the estimate
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            flush()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_s = max(start.elapsed_time(end) / 5 * 1e-3, 1e-9)
        reps = reps if budget_s is None else max(1, int(budget_s / estimate_s))
        warmup = warmup if warmup_s is None else max(1, int(warmup_s / estimate_s))
    assert reps is not None  # given, or computed from budget_s above
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for start, end in events:
        flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in events]


def cuda_graph_times(
    fn: Callable[[], object], *, replays: int = 15, budget_s: float = 4e-3, max_calls: int = 50
) -> list[float]:
    """Seconds per call of ``fn`` captured ``k`` times in one CUDA graph and replayed.

    ``k`` is chosen so one replay takes about ``budget_s`` (at most ``max_calls``): back-to-back
    kernels with no launch gaps, i.e. what a captured decode or prefill step pays. Each of the
    ``replays`` samples is one replay's CUDA-event time divided by ``k``.

    Raises:
        Whatever capture raises for a ``fn`` that cannot be captured (a host sync, say).
    """
    import torch

    _positive("replays", replays)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside capture: lazy init, autotuning, allocator
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        per_call_s = max(start.elapsed_time(end) / 3 * 1e-3, 1e-9)
        k = int(max(1, min(max_calls, budget_s / per_call_s)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(k):
                fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / k)
    del graph
    return samples
