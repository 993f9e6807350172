"""How many torch operations the shared-KV forward plan dispatches itself: a count, not a time.

On CUDA every operation costs the host a launch (about 5-10 us), so the plan's host time grows
with the number of operations it issues. The plan's device work is one ``cpkv_runtime`` op
(``shard_plan``: one C++ entry point on CUDA, the torch reference backend on CPU);
``sglang_cpkv`` adds nothing around it but the one host read.
This test counts the ATen operations that ``plan_forward`` dispatches itself, with a
``TorchDispatchMode`` (it sees every operation below autograd, nothing is patched), and holds
the count at most ``PLAN_OPS``; operations dispatched inside ``cpkv_runtime`` are counted apart
(that package guards its own path, and on CUDA it is one entry point).

The count is the same for every batch: no per-request loop issues device work (held by running
one to eight requests, with and without the interleave-CP row split).

History: 84 operations of its own per forward at first, 45 with the torch-op plan, now one view
(the send list cut to the block; CPU count; the layout's tensors are built only when asked).
"""

from __future__ import annotations

import collections
import os
import sys

import cpkv_runtime as cr
import pytest
import sglang_cpkv
import torch
from _skv_shapes import P, Req, place
from sglang_cpkv.plugin.shared_kv import (
    ScratchGeometry,
    plan_forward,
)
from torch.utils._python_dispatch import TorchDispatchMode

PLAN_OPS = 1  # plan_forward's own ATen operations per forward (CPU): the send list's view
N, RANK = 8, 3
_OURS = os.path.dirname(sglang_cpkv.__file__)
_RUNTIME = os.path.dirname(cr.__file__)


class _CountOps(TorchDispatchMode):
    """Counts each dispatched operation under the innermost ``sglang_cpkv`` or ``cpkv_runtime``
    frame that issued it."""

    def __init__(self) -> None:
        super().__init__()
        self.ours: collections.Counter[str] = collections.Counter()
        self.runtime: collections.Counter[str] = collections.Counter()
        self.uploads = 0  # host -> device copies, wherever issued

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.device.type != "cpu":
            self.uploads += any(
                isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args
            )
        frame = sys._getframe(1)
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(_RUNTIME):
                self.runtime[str(func)] += 1
                break
            if path.startswith(_OURS):
                self.ours[str(func)] += 1
                break
            frame = frame.f_back
        return out


def _case(requests: int, prefix: int, extend: int, kept: bool):
    batch = place("count", [Req("A", prefix, extend) for _ in range(requests)], N)
    geo = ScratchGeometry(
        P, N, RANK, N * requests * (prefix // P + 1), requests * (extend // P + 2)
    )
    rows = list(range(0, requests, 2)) if kept else None
    args = (batch.req_to_token(), torch.arange(requests), batch.prefix, batch.seq,
            batch.out_cache_loc(), geo, N * (batch.local_pages + 1))  # fmt: skip
    return batch, geo, args, rows


CASES = [(1, 4 * P, 100, False), (4, 32 * P + 7, 3 * P, True), (8, 64 * P, 2 * P, False),
         (8, 64 * P, 2 * P, True), (3, 0, 5, False)]  # fmt: skip


@pytest.mark.parametrize(("requests", "prefix", "extend", "kept"), CASES)
def test_plan_forward_dispatches_at_most_plan_ops(requests, prefix, extend, kept):
    _, _, args, rows = _case(requests, prefix, extend, kept)
    plan_forward(*args, kept_rows=rows)  # first call: lazy imports, backend discovery
    with _CountOps() as count:
        plan = plan_forward(*args, kept_rows=rows)
    ours = sum(count.ours.values())
    assert ours <= PLAN_OPS, sorted(count.ours.items(), key=lambda kv: -kv[1])
    assert sum(count.runtime.values()) > 0  # the shard ops ran inside the count
    assert plan.cur_rows.shape == (requests * extend,)


def test_the_count_does_not_grow_with_the_batch():
    """One count per kind of batch (with or without the CP row split)."""
    counts: dict[bool, set[int]] = {False: set(), True: set()}
    for case in CASES:
        _, _, args, rows = _case(*case)
        plan_forward(*args, kept_rows=rows)
        with _CountOps() as count:
            plan_forward(*args, kept_rows=rows)
        counts[rows is not None].add(sum(count.ours.values()))
    assert all(len(c) == 1 for c in counts.values()), counts
