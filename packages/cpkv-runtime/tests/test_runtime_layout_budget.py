"""plan_layout's and plan_layout_static's memory budget: refused from the shapes, before allocating.

- a plan over the budget raises LayoutError naming the sizes, the budget and its source, and no
  tensor larger than the inputs is created first: every op is watched through a
  TorchDispatchMode, factory functions included. Hostile shapes come as expanded (stride-0)
  tensors, so a (100,000 x 100,000) ``req_pages`` costs one element;
- the estimate is an upper bound on what a plan really takes: the peak RSS (VmHWM) of a fresh
  process running one, on every CPU backend that plans, is at most the estimate;
- a per-forward plan (at most 64 MiB) asks the device nothing; an explicit budget always applies;
- random sizes (hypothesis) beside the fixed table: any budget below the estimate is refused first,
  any at or above it lets the plan through.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import cpkv_runtime as cr
import pytest
import torch
from cpkv_runtime import _layout_budget
from cpkv_runtime._layout_budget import ENV, layout_bytes
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode


class _LargestTensor(TorchDispatchMode):
    """Records the bytes of the largest storage any op returns (a view of an expanded tensor
    has many elements and one element's storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def _batch(bsz: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, M) req_pages of one element, expanded; one-token requests."""
    pages = torch.zeros(1, 1, dtype=torch.int32).expand(bsz, width)
    ones = torch.ones(1, dtype=torch.int32).expand(bsz)
    return pages, torch.zeros(1, dtype=torch.int32).expand(bsz), ones


HOSTILE = {
    # name: (op, B, M, num_pages, max_slots, max_bytes, message)
    # 1 * 10**10 * 4 bytes of inverse, + 224 + 32 for the one pair, + 128 + 64 for the one
    # request and column, + 1 MiB: 37.25 GiB
    "pool_of_ten_billion_pages": (
        "plan_layout",
        1,
        1,
        10**10,
        None,
        None,
        r"plan_layout of 1 request x 1 page over a pool of 10,000,000,000 pages would allocate "
        r"37\.25 GiB \(inverse B \* num_pages = 1 \* 10,000,000,000 = 10,000,000,000 int32 "
        r"cells, 1 \(request, page\) pair, 1 slot\), over the budget of .* \(MemAvailable of "
        r"this host\); fix: pass the pool's real num_pages",
    ),
    # 10**10 pairs * (224 + 32) bytes + 100,000 * (4 + 128 + 64) + 1 MiB = 2,384.21 GiB, with a
    # 1-page pool
    "ten_billion_pairs": (
        "plan_layout",
        100_000,
        100_000,
        1,
        None,
        None,
        r"of 100,000 requests x 100,000 pages over a pool of 1 page would allocate "
        r"2,384\.21 GiB .* 10,000,000,000 \(request, page\) pairs, 10,000,000,000 slots\)",
    ),
    # no pair at all: 10**9 requests of no page, 4 + 128 bytes each (a one-page pool) + 1 MiB
    "a_billion_requests_of_no_page": (
        "plan_layout",
        10**9,
        0,
        1,
        None,
        None,
        r"of 1,000,000,000 requests x 0 pages over a pool of 1 page would allocate "
        r"122\.94 GiB .* 0 \(request, page\) pairs, 0 slots\)",
    ),
    # no request at all: 10**12 columns (64 bytes each) = 59,604.64 GiB + 16 pool pages + 1 MiB
    "no_request_of_a_trillion_columns": (
        "plan_layout_static",
        0,
        10**12,
        16,
        None,
        None,
        r"of 0 requests x 1,000,000,000,000 pages .* would allocate 59,604\.65 GiB",
    ),
    # 10**12 slots * 32 bytes = 29,802.32 GiB
    "static_capacity_of_a_trillion_slots": (
        "plan_layout_static",
        2,
        4,
        16,
        10**12,
        None,
        r"plan_layout_static of 2 requests x 4 pages .* 1,000,000,000,000 slots, 16 pool "
        r"pages\), over the budget of .*; fix: pass the pool's real num_pages and a max_slots",
    ),
    # static adds 8 bytes a pool page: 8 * 2**20 * 4 + 8 * 2**20 + 128 * (224 + 32) + 8 * 128
    # + 16 * 64 + 2**20 = 43,026,432 bytes = 41.0 MiB, over a budget of 32 MiB
    "static_over_an_explicit_budget": (
        "plan_layout_static",
        8,
        16,
        2**20,
        None,
        32 * 2**20,
        r"would allocate 41\.0 MiB \(inverse B \* num_pages = 8 \* 1,048,576 = 8,388,608 int32 "
        r"cells, 128 \(request, page\) pairs, 128 slots, 1,048,576 pool pages\), over the budget "
        r"of 32\.0 MiB \(max_bytes=\)",
    ),
    # 8 * 2**20 * 4 + 128 * (224 + 32) + 8 * 128 + 16 * 64 + 2**20 = 34,637,824 bytes = 33.0 MiB,
    # over 1 MiB: an explicit budget applies however small the plan
    "small_plan_over_a_small_budget": (
        "plan_layout",
        8,
        16,
        2**20,
        None,
        2**20,
        r"would allocate 33\.0 MiB .* over the budget of 1\.0 MiB \(max_bytes=\)",
    ),
}


def _call(op, bsz, width, num_pages, max_slots, max_bytes, **kw):
    pages, prefix, extend = _batch(bsz, width)
    if op == "plan_layout":
        return cr.plan_layout(pages, prefix, extend, 64, num_pages, max_bytes=max_bytes, **kw)
    return cr.plan_layout_static(
        pages, prefix, extend, 64, num_pages, max_slots=max_slots, max_bytes=max_bytes, **kw
    )


def test_the_watch_sees_factory_functions():
    with _LargestTensor() as watch:
        torch.full((1000,), -1, dtype=torch.int32)
    assert watch.largest == 4000


@pytest.mark.parametrize(
    ("case", "validate"),
    [
        (case, validate)
        for case in sorted(HOSTILE)
        for validate in ((True, False) if HOSTILE[case][0] == "plan_layout_static" else (True,))
    ],
)
def test_over_budget_is_refused_before_allocating(case, validate, monkeypatch):
    """plan_layout_static also with validate=False and num_tokens: the sync-free call."""
    monkeypatch.delenv(ENV, raising=False)
    op, bsz, width, num_pages, max_slots, max_bytes, message = HOSTILE[case]
    kw = {"validate": validate, "num_tokens": bsz} if op == "plan_layout_static" else {}
    with _LargestTensor() as watch, pytest.raises(cr.LayoutError, match=message):
        _call(op, bsz, width, num_pages, max_slots, max_bytes, **kw)
    assert watch.largest <= 4  # the expanded inputs hold one int32 each


def test_budget_from_the_environment(monkeypatch):
    # 16 * 4 + 2 * (224 + 32) + 128 + 2 * 64 + 2**20 = 1,049,408 bytes = 1.0 MiB needed
    monkeypatch.setenv(ENV, "500")
    with pytest.raises(
        cr.LayoutError, match=rf"1\.0 MiB .* over the budget of 500 bytes \({ENV}=500\)"
    ):
        cr.plan_layout([[3, 4]], [0], [100], 64, 16)
    assert cr.plan_layout([[3, 4]], [0], [100], 64, 16, max_bytes=10**7).num_slots == 2
    monkeypatch.setenv(ENV, "1G")
    with pytest.raises(cr.LayoutError, match=rf"{ENV}='1G': expected a byte count"):
        cr.plan_layout_static([[3, 4]], [0], [100], 64, 16)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8G"])
def test_bad_max_bytes(bad):
    with pytest.raises(cr.LayoutError, match="max_bytes must be an int >= 0 or None"):
        cr.plan_layout([[3]], [0], [10], 64, 16, max_bytes=bad)
    with pytest.raises(cr.LayoutError, match="max_bytes must be an int >= 0 or None"):
        cr.plan_layout_static([[3]], [0], [10], 64, 16, max_bytes=bad)


@pytest.fixture
def device_asks(monkeypatch) -> list[str]:
    """Records each time a layout asks the device for its budget (the real answer is used)."""
    asks: list[str] = []
    real = _layout_budget.device_budget

    def spy(device):
        asks.append(str(device))
        return real(device)

    monkeypatch.setattr(_layout_budget, "device_budget", spy)
    monkeypatch.delenv(ENV, raising=False)
    return asks


def test_a_per_forward_plan_asks_the_device_nothing(device_asks):
    """8 requests of 66K tokens (1056 pages each) over a 2**20-page pool: 42 MiB estimated."""
    assert layout_bytes(8, 1056, 2**20, 8 * 1056, True) <= _layout_budget.SMALL_BYTES
    pages = torch.arange(8 * 1056, dtype=torch.int32).view(8, 1056)
    prefix, extend = [64 * 1024] * 8, [2048] * 8
    layout = cr.plan_layout_static(pages, prefix, extend, 64, 2**20, num_tokens=8 * 2048)
    assert layout.num_slots == 8 * 1056 and device_asks == []
    # over 64 MiB, the device's budget is asked once per call
    cr.plan_layout(pages, prefix, extend, 64, 2**21)  # 8 * 2**21 * 4 bytes of inverse
    assert device_asks == ["cpu"]


def test_ordinary_plans_pass_the_default_budget(monkeypatch):
    """A 2**22-page pool (256M tokens, beyond any single GPU's KV) for 4 requests: 64 MiB of
    inverse, over the free pass, within what this host can hold."""
    monkeypatch.delenv(ENV, raising=False)
    pages = torch.arange(4 * 8, dtype=torch.int32).view(4, 8)
    layout = cr.plan_layout(pages, [0] * 4, [512] * 4, 64, 2**22)
    assert layout.inverse.shape == (4, 2**22)


_MEASURE = """
import sys, torch, cpkv_runtime as cr
from cpkv_runtime._layout_budget import layout_bytes
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
op, bsz, width, num_pages, dedup = sys.argv[1], *map(int, sys.argv[2:6])
torch.manual_seed(0)
base = torch.randperm(num_pages)[:width]
pages = torch.stack([torch.roll(base, b) for b in range(bsz)]).int()  # one page set, rolled
prefix = torch.full((bsz,), (width - 1) * 64, dtype=torch.int32)  # history, then one new page
extend = torch.full((bsz,), 64, dtype=torch.int32)
static = op == "plan_layout_static"
plan = cr.plan_layout_static if static else cr.plan_layout
plan([[0]], [0], [1], 64, 4, backend="torch")  # warm up the allocator and the code paths
before = hwm()
plan(pages, prefix, extend, 64, num_pages, dedup=bool(dedup), backend="torch", max_bytes=2**40)
print(hwm() - before, layout_bytes(bsz, width, num_pages, bsz * width, static))
"""


@pytest.mark.parametrize("op", ["plan_layout", "plan_layout_static"])
@pytest.mark.parametrize(
    ("bsz", "width", "num_pages", "dedup"),
    [(2, 300_000, 300_000, 0), (8, 16, 3_000_000, 1), (16, 20_000, 400_000, 1)],
    ids=["pairs", "inverse", "both"],
)
def test_the_estimate_bounds_the_real_peak(op, bsz, width, num_pages, dedup):
    """In a fresh process: the peak RSS rise of one plan is at most its estimate (tensors this
    size are mmap'd, so RSS follows what is alive)."""
    argv = [op, str(bsz), str(width), str(num_pages), str(dedup)]
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    measured, estimate = map(int, proc.stdout.split())
    print(f"measured {measured / 2**20:.1f} MiB, estimate {estimate / 2**20:.1f} MiB")
    assert 0 < measured <= estimate


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_budget_and_no_host_sync(monkeypatch):
    """The default budget on CUDA is the free memory; the check adds no host sync to the
    sync-free call (validate=False with num_tokens), over the free pass or not."""
    monkeypatch.delenv(ENV, raising=False)
    pages = torch.zeros(1, 1, dtype=torch.int32, device="cuda")
    lens = torch.ones(1, dtype=torch.int32, device="cuda")
    with pytest.raises(cr.LayoutError, match=r"\(free memory of cuda:0\)"):
        cr.plan_layout(pages, lens * 0, lens, 64, 10**12)
    big = torch.arange(8, dtype=torch.int32, device="cuda").view(1, 8)
    torch.cuda.synchronize()
    try:  # set inside the try: a failure to set it must not leave "error" on for later tests
        with warnings.catch_warnings():  # "a prototype feature": a warning, not the point here
            warnings.simplefilter("ignore", UserWarning)
            torch.cuda.set_sync_debug_mode("error")
        for num_pages in (64, 2**25):  # 128 MiB of inverse: asks the device
            cr.plan_layout_static(
                big, lens * 0, lens * 512, 64, num_pages, num_tokens=512, validate=False
            )
    finally:
        torch.cuda.set_sync_debug_mode("default")


# Random sizes beside the fixed table -----------------------------------------------------------
OPS = st.sampled_from(["plan_layout", "plan_layout_static"])


@settings(max_examples=80, deadline=None)
@given(
    op=OPS,
    bsz=st.one_of(st.integers(0, 64), st.integers(0, 10**7)),
    width=st.one_of(st.integers(0, 64), st.integers(0, 10**7)),
    num_pages=st.one_of(st.integers(1, 2**20), st.integers(1, 10**12)),
    max_slots=st.one_of(st.none(), st.integers(0, 10**13)),
    below=st.one_of(st.just(1), st.integers(1, 2**50)),
    validate=st.booleans(),
)
@example("plan_layout", 1, 1, 10**10, None, 1, True)
def test_any_size_over_its_budget_is_refused_first(
    op, bsz, width, num_pages, max_slots, below, validate
):
    """However the sizes combine, a budget below the estimate is refused with one line naming the
    budget, before any tensor larger than the (expanded, one-element) inputs exists."""
    static = op == "plan_layout_static"
    max_slots = max_slots if static else None
    slots = (bsz * width if max_slots is None else max_slots) if static else bsz * width
    need = layout_bytes(bsz, width, num_pages, slots, static)
    assert need >= 4 * bsz * num_pages + 2**20  # the exact inverse term, and the fixed one
    max_bytes = max(need - below, 0)
    kw = {"validate": validate, "num_tokens": bsz} if static else {}
    with _LargestTensor() as watch, pytest.raises(cr.LayoutError) as info:
        _call(op, bsz, width, num_pages, max_slots, max_bytes, **kw)
    message = str(info.value)
    assert "\n" not in message and "over the budget of " in message and "(max_bytes=)" in message
    assert message.startswith(f"{op} of ") and "fix: " in message
    assert watch.largest <= 4


@settings(max_examples=30, deadline=None)
@given(
    op=OPS,
    bsz=st.integers(1, 8),
    width=st.integers(1, 8),
    spare=st.integers(0, 2**16),
    over=st.integers(0, 2**20),
)
def test_a_plan_within_its_budget_runs(op, bsz, width, spare, over):
    """The same check lets every plan at or under its budget through, and the plan is made."""
    pages = torch.arange(bsz * width, dtype=torch.int32).view(bsz, width)
    num_pages = bsz * width + spare
    need = layout_bytes(bsz, width, num_pages, bsz * width, op == "plan_layout_static")
    plan = cr.plan_layout if op == "plan_layout" else cr.plan_layout_static
    layout = plan(pages, [0] * bsz, [64 * width] * bsz, 64, num_pages, max_bytes=need + over)
    assert layout.num_slots == bsz * width and layout.inverse.shape[1] == num_pages
