"""``run_warmup`` on the real sgl-deep-gemm wheel: every planned call runs, budgets truncate.

A hand-made three-shape plan keeps the cold compile to a few kernels (seconds, not minutes).
"""

from __future__ import annotations

import deepgemm_compat as dgc
import pytest
import torch
from deepgemm_compat.warmup import (
    CPSetup,
    DenseCap,
    GemmShape,
    KernelType,
    PlanEntry,
    WarmupPlan,
    run_warmup,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (run on the H200)"
    ),
]

DENSE = GemmShape(KernelType.GEMM_NT_F8F8BF16, 512, 512, name="dense")
GROUPED = GemmShape(KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG, 256, 512, 2, name="grouped")
MASKED = GemmShape(KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 256, 512, 2, name="masked")


def _plan() -> WarmupPlan:
    entries = (
        PlanEntry(DENSE, before=(1, 64, 128, 256), after=(1, 64), reason="test"),
        PlanEntry(GROUPED, before=(128, 256), after=(128, 256), reason="test"),
        PlanEntry(MASKED, before=(8, 16), after=(8, 16), reason="test"),
    )
    cap = DenseCap(forward_tokens=256, rows=None, cap=64, reason="test")
    return WarmupPlan(256, False, CPSetup(), 256, 64, cap, "test", entries=entries)


@pytest.fixture(scope="module", autouse=True)
def real_wheel():
    dgc.use_module(None)
    try:
        dgc.load(force=True)
    except dgc.DeepGemmUnavailable as exc:
        pytest.fail(f"the real wheel must load here: {exc}")
    dgc.apply_pdl(0, True)


@pytest.mark.parametrize("grid", ["after", "before"])
def test_every_planned_call_runs(grid):
    lines: list[str] = []
    run = run_warmup(_plan(), grid=grid, progress=lines.append, progress_every_s=1e-6)
    plan = _plan()
    expected = plan.after_total if grid == "after" else plan.before_total
    assert not run.truncated
    assert run.executed == expected
    assert [s.executed for s in run.shapes] == [s.planned for s in run.shapes]
    # one sample per call past the first tick plus one per shape end: monotone, ends at total
    times, calls = zip(*run.timeline, strict=True)
    assert list(times) == sorted(times) and list(calls) == sorted(calls)
    assert calls[-1] == expected and len(lines) == len(run.timeline)
    assert sum("done" in line for line in lines) == 3


def test_budget_truncates_after_one_call():
    run = run_warmup(_plan(), budget_s=0.0)
    assert run.truncated
    assert [s.executed for s in run.shapes] == [1, 0, 0]
    assert run.timeline[-1][1] == 1
