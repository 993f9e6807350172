"""cp_split's memory budget: the size is known exactly and refused before anything of it exists.

- the padded length worked out from the lengths alone equals the one the split then builds;
- a split over the budget raises LayoutError naming the sizes, the budget and its source, and no
  tensor larger than the inputs' own size (B lengths, cp_size counts) is created first: every op
  is watched through a TorchDispatchMode, factory functions included;
- the estimate is an upper bound on what a split really takes: the peak RSS of a fresh process
  (its own VmHWM) running one is at most the estimate.
"""

from __future__ import annotations

import subprocess
import sys

import cpkv_runtime as cr
import pytest
import torch
from cpkv_runtime._cp_budget import ENV, padded_local_len
from hypothesis import given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode


class _LargestTensor(TorchDispatchMode):
    """Records the element count of the largest tensor any op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@given(
    extend=st.lists(st.integers(0, 60), min_size=1, max_size=8),
    cp=st.integers(1, 9),
    strategy=st.sampled_from(["zigzag", "interleave"]),
)
def test_padded_len_is_the_splits(extend, cp, strategy):
    lens = torch.tensor(extend)
    got = padded_local_len(lens, sum(extend), cp, strategy)
    assert got == cr.cp_split(extend, cp, strategy=strategy).local_len


HOSTILE = {
    # (extend_lens, cp_size, strategy, max_bytes or None for the host's MemAvailable, message)
    # at least (2e12 rows * 96 + 2e6 block entries * 64 + 1e6 ranks * 64) / 2**30 GiB
    "cp_million_one_token": (
        [1],
        10**6,
        "zigzag",
        None,
        r"cp_split\(cp_size=1000000, strategy='zigzag'\) of 1 token in 1 request would allocate "
        r"at least 178,814\.11 GiB \(cp_size \* local_len = 1,000,000 \* 2,000,000 = "
        r"2,000,000,000,000 padded rows, .* over the budget of .* \(MemAvailable of this host\)",
    ),
    "cp_huge_empty_batch": (
        [0, 0],
        10**13,
        "interleave",
        None,
        r"of 0 tokens in 2 requests would allocate at least .* 10,000,000,000,000 per-rank",
    ),
    "many_requests_times_cp": (
        [0] * 20_000 + [1],
        4096,
        "zigzag",
        2**30,
        r"2 \* cp_size \* B = 163,848,192 zigzag block entries.*\(max_bytes=\)",
    ),
    # the lower bound (8 * 16 rows) fits; the exact length, 2 blocks of 100,000 / 16 per request
    # on each rank, does not: (400,000 * 96 + 64 * 64 + 8 * 64) / 2**20 MiB
    "exact_length_over_budget": (
        [100_000] * 4,
        8,
        "zigzag",
        20 * 2**20,
        r"would allocate 36\.6 MiB \(cp_size \* local_len = 8 \* 50,000 = 400,000 padded rows",
    ),
}


def test_the_watch_sees_factory_functions():
    with _LargestTensor() as watch:
        torch.arange(1000)
    assert watch.largest == 1000


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_over_budget_is_refused_before_allocating(case):
    extend, cp, strategy, max_bytes, message = HOSTILE[case]
    lens = torch.tensor(extend)
    with _LargestTensor() as watch, pytest.raises(cr.LayoutError, match=message):
        cr.cp_split(lens, cp, strategy=strategy, max_bytes=max_bytes)
    # nothing bigger than the lengths themselves, or the per-rank counts of the exact check
    assert watch.largest <= max(len(extend), cp + 1 if case == "exact_length_over_budget" else 0)


def test_companion_rows_count(monkeypatch):
    """A [T, 6144] bf16 companion (a hidden state) costs 12 KiB per padded row, twice."""
    hidden = torch.zeros(64, 6144, dtype=torch.bfloat16)
    with pytest.raises(cr.LayoutError, match=r"would allocate 1\.5 MiB"):
        cr.cp_split([64], 2, hidden, max_bytes=2**20)  # 64 padded rows * (96 + 2 * 12288) bytes
    assert cr.cp_split([64], 2, hidden, max_bytes=2 * 2**20).local_len == 32


def test_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv(ENV, "1000")
    with pytest.raises(cr.LayoutError, match=rf"over the budget of 1,000 bytes \({ENV}=1000\)"):
        cr.cp_split([100], 4)
    assert cr.cp_split([100], 4, max_bytes=10**9).local_len == 32  # the argument wins
    monkeypatch.setenv(ENV, "8G")
    with pytest.raises(cr.LayoutError, match=rf"{ENV}='8G': expected a byte count"):
        cr.cp_split([100], 4)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8G"])
def test_bad_max_bytes(bad):
    with pytest.raises(cr.LayoutError, match="max_bytes must be an int >= 0 or None"):
        cr.cp_split([4], 2, max_bytes=bad)


def test_ordinary_splits_pass_the_default_budget(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    split = cr.cp_split([202_752], 8, torch.zeros(202_752, dtype=torch.int64))  # GLM-5's context
    assert split.local_len == 25_344 and split.padded_len == 202_752


_MEASURE = """
import sys, torch, cpkv_runtime as cr
from cpkv_runtime import _cp_budget as b
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
strategy, cp, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
lens = torch.randint(0, 2 * 16384, (16,))
total = int(lens.sum())
comps = (torch.zeros(total, width, dtype=torch.uint8),) if width else ()
cr.cp_split([3, 5], 2, strategy=strategy)  # warm up the allocator and the code paths
before = hwm()
cr.cp_split(lens, cp, *comps, strategy=strategy)
local_len = b.padded_local_len(lens, total, cp, strategy)
blocks = 2 * cp * 16 * b.BLOCK_BYTES if strategy == "zigzag" else 0
estimate = cp * local_len * (b.ROW_BYTES + 2 * width) + blocks + cp * b.RANK_BYTES
print(hwm() - before, estimate)
"""


@pytest.mark.parametrize(
    ("strategy", "cp", "width"), [("zigzag", 8, 0), ("zigzag", 8, 128), ("interleave", 4, 0)]
)
def test_the_estimate_bounds_the_real_peak(strategy, cp, width):
    """A 260K-token split in a fresh process: its peak RSS rise is at most the estimate (tensors
    this size are mmap'd, so RSS follows what is alive)."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, strategy, str(cp), str(width)],
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
def test_cuda_default_budget_is_the_free_memory():
    lens = torch.tensor([1], device="cuda")
    with pytest.raises(cr.LayoutError, match=r"\(free memory of cuda:0\)"):
        cr.cp_split(lens, 10**6)
    assert cr.cp_split(torch.tensor([1000], device="cuda"), 8).local_len == 128
