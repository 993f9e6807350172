"""CP-aware DeepGEMM warmup: plan the M grid per GEMM shape, then run it through the facade.

Example (CPU, no DeepGEMM needed)::

    from deepgemm_compat.warmup import CPSetup, glm51_shapes, plan_warmup
    plan = plan_warmup(glm51_shapes(), 65536, CPSetup(8, "interleave"))
    plan.dense_m_max          # 16384 for the attention side (131072 without CP, under zigzag)

``run_warmup(plan)`` executes it on the current GPU: one call per (shape, M), which makes
DeepGEMM JIT-compile every kernel config the grid reaches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deepgemm_compat._cp_rows import cp_applies, max_rank_rows, rank_rows
from deepgemm_compat._glm51 import (
    GLM51,
    dsa_attention_shapes,
    dsa_ffn_shapes,
    glm51_reduced_shapes,
    glm51_shapes,
)
from deepgemm_compat._mlist import (
    HELD_EQUAL_TO,
    copy_m_list,
    resolve_m_list,
    sglang_m_list,
    sglang_m_max,
    upstream_m_list,
)
from deepgemm_compat._plan import (
    DenseCap,
    PlanEntry,
    WarmupPlan,
    compress,
    dense_cap,
    fast_to_chunk_ms,
    plan_warmup,
    shape_m_list,
)
from deepgemm_compat._shapes import CPSetup, CPSplit, GemmShape, KernelType, Rows

__all__ = [
    "GLM51",
    "HELD_EQUAL_TO",
    "CPSetup",
    "CPSplit",
    "DenseCap",
    "GemmShape",
    "KernelType",
    "PlanEntry",
    "Rows",
    "ShapeRun",
    "WarmupPlan",
    "WarmupRun",
    "compress",
    "copy_m_list",
    "cp_applies",
    "dense_cap",
    "dsa_attention_shapes",
    "dsa_ffn_shapes",
    "fast_to_chunk_ms",
    "glm51_reduced_shapes",
    "glm51_shapes",
    "max_rank_rows",
    "plan_warmup",
    "rank_rows",
    "resolve_m_list",
    "run_warmup",
    "sglang_m_list",
    "sglang_m_max",
    "shape_m_list",
    "upstream_m_list",
]


_DENSE = KernelType.GEMM_NT_F8F8BF16
_CONTIG = KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG
_MASKED = KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED


@dataclass
class ShapeRun:
    """What ``run_warmup`` did for one shape."""

    name: str
    kernel: str
    planned: int
    executed: int = 0
    seconds: float = 0.0


@dataclass
class WarmupRun:
    """Totals of one ``run_warmup``; ``truncated`` when the time budget stopped it.

    ``timeline`` holds ``(seconds since start, calls executed so far)`` samples, one per
    ``progress_every_s`` and one at each shape's end, so runs can be compared over time.
    """

    shapes: list[ShapeRun] = field(default_factory=list)
    seconds: float = 0.0
    truncated: bool = False
    timeline: list[tuple[float, int]] = field(default_factory=list)

    @property
    def executed(self) -> int:
        return sum(s.executed for s in self.shapes)


def _executor(entry: PlanEntry, max_m: int) -> Callable[[int], None]:
    """Buffers sized for ``max_m`` and a call per M, as SGLang's warmup executors do."""
    import torch

    from deepgemm_compat._gemm import fp8_gemm_nt, grouped_gemm_contiguous, grouped_gemm_masked

    s = entry.shape
    if s.kernel not in (_DENSE, _CONTIG, _MASKED):
        raise NotImplementedError(f"run_warmup has no executor for {s.kernel.value}")
    kb, nb = (s.k + 127) // 128, (s.n + 127) // 128
    lhs_g = (s.groups,) if s.kernel is _MASKED else ()  # masked: an M_max block per expert
    rhs_g = (s.groups,) if s.kernel.grouped else ()

    def fp8(*shape: int) -> torch.Tensor:
        return torch.empty(shape, device="cuda", dtype=torch.float8_e4m3fn)

    def ones(*shape: int) -> torch.Tensor:
        return torch.ones(shape, device="cuda")

    a, sa = fp8(*lhs_g, max_m, s.k), ones(*lhs_g, max_m, kb)
    b, sb = fp8(*rhs_g, s.n, s.k), ones(*rhs_g, nb, kb)
    out = torch.empty((*lhs_g, max_m, s.n), device="cuda", dtype=torch.bfloat16)
    if s.kernel is _DENSE:
        return lambda m: fp8_gemm_nt((a[:m], sa[:m]), (b, sb), out[:m])
    if s.kernel is _CONTIG:
        layout = torch.zeros((max_m,), device="cuda", dtype=torch.int32)
        return lambda m: grouped_gemm_contiguous((a[:m], sa[:m]), (b, sb), out[:m], layout[:m])
    masked_m = torch.zeros((s.groups,), device="cuda", dtype=torch.int32)
    return lambda m: grouped_gemm_masked((a, sa), (b, sb), out, masked_m, m)


def run_warmup(
    plan: WarmupPlan,
    *,
    grid: str = "after",
    budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every_s: float = 10.0,
) -> WarmupRun:
    """Execute the plan's M grid on the current CUDA device (compiles on first use).

    Args:
        plan: from ``plan_warmup``.
        grid: ``"after"`` (CP-aware) or ``"before"`` (SGLang's grid).
        budget_s: stop (``truncated=True``) once this many seconds have passed.
        progress: called with a line every ``progress_every_s`` and when a shape finishes;
            a cold-cache warmup compiles for minutes, and silence reads as a hang.
        progress_every_s: also the sampling period of ``WarmupRun.timeline``.
    """
    import torch

    from deepgemm_compat._load import require_cuda
    from deepgemm_compat._pdl import compile_mode

    if grid not in ("after", "before"):
        raise ValueError(f"grid must be 'after' or 'before', got {grid!r}")
    if progress_every_s <= 0:
        raise ValueError(f"progress_every_s must be > 0, got {progress_every_s}")
    require_cuda()
    run, start = WarmupRun(), time.perf_counter()
    next_tick = progress_every_s

    def sample(shape_run: ShapeRun, total: int, final: bool) -> None:
        elapsed = time.perf_counter() - start
        run.timeline.append((elapsed, run.executed))
        if progress:
            verb = "done" if final else "at"
            progress(
                f"{shape_run.name}: {verb} {shape_run.executed}/{total} Ms, "
                f"{run.executed} calls in {elapsed:.1f}s"
            )

    for entry in plan.entries:
        ms = entry.after if grid == "after" else entry.before
        shape_run = ShapeRun(entry.shape.name, entry.shape.kernel.value, len(ms))
        run.shapes.append(shape_run)
        if not ms or run.truncated:
            continue
        call, t0 = _executor(entry, max(ms)), time.perf_counter()
        with compile_mode(1):
            for m in ms:
                call(m)
                shape_run.executed += 1
                now = time.perf_counter() - start
                if budget_s is not None and now > budget_s:
                    run.truncated = True
                    break
                if now >= next_tick:
                    next_tick = now + progress_every_s
                    sample(shape_run, len(ms), final=False)
        torch.cuda.synchronize()
        shape_run.seconds = time.perf_counter() - t0
        del call
        torch.cuda.empty_cache()
        sample(shape_run, len(ms), final=True)
    run.seconds = time.perf_counter() - start
    return run
