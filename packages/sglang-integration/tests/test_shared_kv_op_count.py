"""How many torch operations the shared-KV forward plan dispatches: a count, not a time.

On CUDA every operation costs the host a launch (about 5-10 us), so the plan's host time grows
with the number of operations it issues; the per-forward goal (issue 17: about 100 us with the
one host read) leaves room for a few dozen. This test counts the ATen operations that
``plan_forward`` dispatches itself, with a ``TorchDispatchMode`` (it sees every operation below
autograd, nothing is patched), and holds the count at most ``PLAN_OPS``. Operations dispatched
inside ``cpkv_runtime`` (``plan_layout_static``: one launcher on CUDA, the torch reference
backend on CPU) are counted apart and not held here: that package guards its own path.

The count is the same for every batch: no per-request loop issues device work (held by running
one to eight requests, with and without the interleave-CP row split). The meta-device run of the
two halves counts the uploads too (on CPU a host tensor needs no copy).

Before this guard the plan dispatched 84 operations of its own per forward (CPU count).
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
from sglang_cpkv.shared_kv import (
    ScratchGeometry,
    draft_forward,
    finish_forward,
    plan_forward,
    request_pages,
)
from torch.utils._python_dispatch import TorchDispatchMode

PLAN_OPS = 45  # plan_forward's own ATen operations per forward (CPU)
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
    pages = request_pages(batch.req_to_token(), torch.arange(requests), batch.seq, P)
    rows = list(range(0, requests, 2)) if kept else None
    args = (pages, batch.prefix, batch.seq, batch.out_cache_loc(), geo, N * (batch.local_pages + 1))
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
    assert sum(count.runtime.values()) > 0  # plan_layout_static ran inside the count
    assert plan.cur_rows.shape == (requests * extend,)


def test_the_count_does_not_grow_with_the_batch():
    counts = set()
    for case in CASES:
        _, _, args, rows = _case(*case)
        plan_forward(*args, kept_rows=rows)
        with _CountOps() as count:
            plan_forward(*args, kept_rows=rows)
        counts.add(sum(count.ours.values()))
    assert len(counts) == 1, counts


def test_meta_halves_count_their_uploads():
    """On meta, uploads are real copies: the draft makes one, the finish one (host-known
    values travel together, not one tensor each)."""
    batch, geo, args, rows = _case(8, 64 * P, 2 * P, True)
    pages, _, _, oc, _, num_pages = args
    cpu = draft_forward(pages, batch.prefix, batch.extend, oc, geo, num_pages, rows)
    numbers = cpu.slots.host_numbers.tolist()
    meta = torch.device("meta")
    pages, oc = pages.to(meta), oc.to(meta)
    with _CountOps() as count:
        draft = draft_forward(pages, batch.prefix, batch.extend, oc, geo, num_pages, rows)
        finish_forward(draft, numbers, geo)
    assert count.uploads == 2, count.ours
    assert sum(count.ours.values()) <= PLAN_OPS + 2
