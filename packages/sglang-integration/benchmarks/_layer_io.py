"""Timing and environment for ``bench_shared_kv_layer.py``, kept in one place.

The record, table and plot are benchkit's (``tools/benchkit``). The timers here keep their own
fitted repetition budget and ``Times``/``Row`` shapes, which the benchmark's measurement code is
written against; their names match benchkit's (``cuda_event_times``, ``cuda_graph_times``,
``wall_times``) so that moving them onto benchkit touches this file and the imports only.
"""

from __future__ import annotations

import datetime as dt
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

QUANTILES = (0.2, 0.5, 0.8)


@dataclass(frozen=True)
class Times:
    """p20/p50/p80 of ``n`` samples, in microseconds."""

    p20: float
    p50: float
    p80: float
    n: int

    @staticmethod
    def of(samples_us: list[float]) -> Times:
        s = sorted(samples_us)
        q = statistics.quantiles(s, n=10, method="inclusive") if len(s) > 1 else s * 9
        return Times(q[1], statistics.median(s), q[7], len(s))


def _reps(first_us: float, budget_s: float, low: int, high: int) -> int:
    return int(min(high, max(low, budget_s * 1e6 / max(first_us, 1.0))))


def cuda_event_times(
    fn: Callable[[], object], *, budget_s: float = 2.0, low: int = 5, high: int = 50
) -> Times:
    """Per-call GPU time of ``fn`` by CUDA events; one warm-up call, reps fitted to the budget."""
    fn()
    torch.cuda.synchronize()
    samples = []
    reps = high
    for i in range(high):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
        if i == 0:
            reps = _reps(samples[0], budget_s, low, high)
        if len(samples) >= reps:
            break
    return Times.of(samples)


def cuda_graph_times(
    fn: Callable[[], object], *, budget_s: float = 2.0, low: int = 5, high: int = 50
) -> Times:
    """Per-replay GPU time of ``fn`` captured once in a CUDA graph (after a side-stream warm-up)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    try:
        return cuda_event_times(graph.replay, budget_s=budget_s, low=low, high=high)
    finally:
        del graph


@dataclass(frozen=True)
class Clock:
    """How one run times: CUDA events and graphs on a GPU; on CPU (``--dry``) the host wall
    clock, few reps, and no graphs."""

    cuda: bool
    budget_s: float = 1.5

    def events(self, fn: Callable[[], object]) -> Times:
        if self.cuda:
            return cuda_event_times(fn, budget_s=self.budget_s)
        return wall_times(fn, reps=3)

    def graph(self, fn: Callable[[], object]) -> Times | None:
        return cuda_graph_times(fn, budget_s=self.budget_s) if self.cuda else None

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def wall_times(
    fn: Callable[[], object], *, reps: int = 20, sync: bool = True, warmup: int = 1
) -> Times:
    """Host wall time of ``fn`` in us; with ``sync`` each sample waits for the GPU to finish.
    ``warmup`` untimed calls first (Python's specialising interpreter and the allocators settle
    over a few calls: the first case of a run otherwise pays for it)."""
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if sync and cuda:
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
    return Times.of(samples)


def capture_env(command: str) -> dict[str, object]:
    """The record's environment: device, versions, time, command."""
    env: dict[str, object] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu": platform.processor() or platform.machine(),
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    for dist in ("sglang", "sgl-deep-gemm"):
        try:
            from importlib.metadata import version

            env[dist] = version(dist)
        except Exception:
            env[dist] = None
    return env


@dataclass
class Row:
    """One measured quantity of one case; times in microseconds."""

    case: str
    phase: str
    path: str  # "cpkv" (materialised scratch), "replica" (whole pool), or "both" (shared phase)
    mode: str  # "eager" (CUDA events), "graph" (replays), "host" (wall clock), "dry" (CPU check)
    p20: float | None = None
    p50: float | None = None
    p80: float | None = None
    n: int = 0
    unit: str = "us"
    note: str = ""
    meta: dict[str, object] = field(default_factory=dict)

    @staticmethod
    def timed(case: str, phase: str, path: str, mode: str, t: Times, **meta: object) -> Row:
        return Row(case, phase, path, mode, t.p20, t.p50, t.p80, t.n, meta=dict(meta))
