"""Timing, environment and output helpers for the cpkv-kernels benchmarks (CUDA events)."""

from __future__ import annotations

import datetime as dt
import json
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

QUANTILES = (0.5, 0.2, 0.8)
COLORS = {"torch": "C3", "triton": "C4", "cuda": "C1", "index_select": "C2", "index_copy_": "C2"}


@dataclass
class Row:
    """One (op, case, provider, mode) measurement; times in microseconds."""

    op: str
    case: str
    provider: str
    mode: str  # "eager": L2 flushed before each call; "graph": k calls replayed in a CUDA graph;
    # "host": wall clock of back-to-back eager calls (shows the host cost when it dominates)
    p50: float | None
    p20: float | None
    p80: float | None
    unit: str = "us"
    bytes_moved: int = 0
    tbps: float | None = None  # bytes_moved / p50
    parity: bool | None = None  # bitwise equal to the torch reference on this case
    note: str = ""
    meta: dict[str, object] = field(default_factory=dict)


def env_info(command: str) -> dict[str, object]:
    import triton

    try:
        from importlib.metadata import version

        pkg = version("cpkv-kernels")
    except Exception:  # a PYTHONPATH checkout has no metadata
        pkg = "0.1.0 (checkout)"
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu_name": props.name,
        "sm_count": props.multi_processor_count,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
        "pkg_version": pkg,
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
    }


def time_eager(fn: Callable[[], object]) -> tuple[float, float, float]:
    """p50/p20/p80 in us with triton's do_bench (CUDA events, L2 flushed before each call)."""
    from triton.testing import do_bench

    ms = do_bench(fn, warmup=10, rep=60, quantiles=list(QUANTILES))
    return tuple(v * 1e3 for v in ms)  # type: ignore[return-value]


def time_host(fn: Callable[[], object], calls: int = 40) -> tuple[float, float, float]:
    """Wall-clock us per call of back-to-back calls: the host cost where it exceeds the GPU time."""
    import time

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6 / calls)
    t = torch.tensor(samples)
    return tuple(float(torch.quantile(t, q)) for q in QUANTILES)  # type: ignore[return-value]


def time_graph(fn: Callable[[], object], budget_ms: float = 4.0) -> tuple[float, float, float]:
    """p50/p20/p80 in us per call of ``fn`` replayed k times in one CUDA graph (no launch gaps)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        k = int(max(1, min(50, budget_ms / max(start.elapsed_time(end) / 3, 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(k):
                fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / k)
    del graph
    t = torch.tensor(samples)
    return tuple(float(torch.quantile(t, q)) for q in QUANTILES)  # type: ignore[return-value]


def write_json(
    path: Path, env: dict[str, object], rows: list[Row], summary: dict[str, object]
) -> None:
    data = {"env": env, "summary": summary, "rows": [{**asdict(r), **env} for r in rows]}
    path.write_text(json.dumps(data, indent=1) + "\n")


def _plotted(rows: list[Row], op: str, fmt: object, prov: str, mode: str) -> list[Row]:
    """One line's rows. ``copy`` always comes from eager timing: captured in a graph it becomes a
    copy-engine memcpy node, slower than the copy kernel eager mode runs."""
    mode = "eager" if prov == "copy" else mode
    return [
        r
        for r in rows
        if (r.op, r.provider, r.mode) == (op, prov, mode) and r.meta.get("row") == fmt and r.tbps
    ]


def plot_bandwidth(path: Path, rows: list[Row], copy_tbps: float, ops: tuple[str, ...]) -> None:
    """Effective bandwidth vs bytes moved: a panel per (op, timing mode, row format), a line per
    provider. Eager: one launch, L2 flushed (small sizes show host cost); graph: warm L2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    formats = sorted({str(r.meta.get("row", "")) for r in rows if r.op in ops})
    panels = [(op, mode) for op in ops for mode in ("eager", "graph")]
    fig, axes = plt.subplots(
        len(panels), len(formats), figsize=(5 * len(formats), 3.6 * len(panels)), squeeze=False
    )
    for i, (op, mode) in enumerate(panels):
        for j, fmt in enumerate(formats):
            ax = axes[i][j]
            provs = sorted({r.provider for r in rows if r.op == op and r.meta.get("row") == fmt})
            for prov in provs:
                pts = sorted((r.bytes_moved, r.tbps) for r in _plotted(rows, op, fmt, prov, mode))
                if pts:
                    x, y = [p[0] / 2**20 for p in pts], [p[1] for p in pts]
                    ax.plot(x, y, marker="o", label=prov, color=COLORS.get(prov, "C0"))
            ax.axhline(copy_tbps, color="k", ls="--", lw=1, label=f"D2D copy {copy_tbps:.2f}")
            ax.axhline(0.85 * copy_tbps, color="gray", ls=":", lw=1, label="85% goal")
            ax.set_xscale("log")
            ax.set_title(f"{op} {fmt} rows, {mode}")
            ax.set_xlabel("bytes moved (read + write), MiB")
            ax.set_ylabel("TB/s")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
