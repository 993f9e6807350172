"""plan_slots: Triton (and CUDA where present) == the torch definition, bitwise, every output.

The torch definition is held to plan_layout's numbering in cpkv-runtime's tests; here the kernels
are held to it on the named adversarial batches and random ones (shared prefixes, stale page ids
past the used pages, empty requests), at every capacity from too small to the default, with int32
and int64 inputs; on bad input only ``used_slots``, ``status`` and ``info`` are defined and must
agree.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import torch
from _cases import Batch, named_batches, random_batch
from _compare import assert_bitwise_equal

OUTPUTS = (
    "pages", "prefix", "extend", "seq", "pages_used", "slot_table", "slot_page", "slot_owner",
    "inverse", "used_slots", "status", "info",
)  # fmt: skip


def _args(batch: Batch, device: str, dtype: torch.dtype, stale: bool):
    rows = torch.tensor(batch.req_pages, dtype=dtype).view(len(batch.prefix), -1)
    if stale:  # ids past the used pages are ignored: make them anything but -1
        rows = torch.where(rows < 0, torch.randint_like(rows, 0, batch.num_pages), rows)
    prefix = torch.tensor(batch.prefix, dtype=dtype)
    extend = torch.tensor(batch.extend, dtype=dtype)
    return rows.to(device), prefix.to(device), extend.to(device)


def _check(impls, torch_ops, args, page_size, num_pages, label, info_only=False):
    rows = args[0]
    needed = int(torch_ops["plan_slots"](*args, page_size, num_pages, rows.numel(), True)[-1][0])
    for dedup in (True, False):
        for capacity in sorted({0, max(needed - 1, 0), needed, rows.numel()}):
            call = (*args, page_size, num_pages, capacity, dedup)
            want = torch_ops["plan_slots"](*call)
            for name, ops in impls.items():
                got = ops["plan_slots"](*call)
                pairs = list(zip(OUTPUTS, got, want, strict=True))
                for out, g, w in pairs if not info_only else pairs[9:]:  # the counts, status
                    where = f"{name} {label} dedup={dedup} S={capacity} {out}"
                    assert_bitwise_equal(where, g, w, min(g.dim(), 2), "index")


@pytest.mark.parametrize("stale", [False, True])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("case", [b.name for b in named_batches(1)])
def test_named_batches(case, page_size, dtype, stale, device, impls, torch_ops):
    batch = next(b for b in named_batches(page_size) if b.name == case)
    args = _args(batch, device, dtype, stale)
    _check(impls, torch_ops, args, page_size, batch.num_pages, f"{case} P={page_size}")


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("bsz", [1, 3, 7])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_random_batches(page_size, bsz, share, device, impls, torch_ops):
    rng = random.Random(f"plan-{page_size}-{bsz}-{share}")
    batch = random_batch(rng, bsz, page_size, share, max_seq=5 * page_size + 3)
    args = _args(batch, device, rng.choice([torch.int32, torch.int64]), rng.random() < 0.5)
    _check(impls, torch_ops, args, page_size, batch.num_pages, f"B={bsz} P={page_size}")


BAD = {  # (req_pages, prefix, extend): the status bits must agree (other outputs undefined)
    "duplicate_page_in_request": ([[3, 4, -1], [1, 2, 2]], [8, 20], [3, 2]),
    "page_out_of_range": ([[1, 99]], [8], [2]),
    "absent_page_in_use": ([[1, -1]], [8], [2]),
    "too_long": ([[1, 2]], [16], [1]),
    "negative_lengths": ([[1, 2], [3, 4]], [-9, 3], [3, -1]),
    "everything_wrong": ([[5, 5, 99], [-1, 2, 2]], [24, -3], [0, 40]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_status_agrees(case, device, impls, torch_ops):
    rows, prefix, extend = BAD[case]
    args = tuple(torch.tensor(x, device=device) for x in (rows, prefix, extend))
    _check(impls, torch_ops, args, 8, 16, case, info_only=True)
    info = torch_ops["plan_slots"](*args, 8, 16, 6, True)[-1]
    assert int(info[1]) != 0


def test_tiles_carry_the_count_across_tiles(device, impls, torch_ops, monkeypatch):
    """More pairs than one tile of either kernel (4,096 on a GPU; 512 when interpreted, where
    tiles are otherwise as wide as the batch), sharing pages across tile borders."""
    from cpkv_kernels.ops import plan_slots

    monkeypatch.setattr(plan_slots, "CPU_BLOCK", 512)
    rng = random.Random(11)
    batch = random_batch(rng, 6, 4, 0.7, max_seq=4 * 1500)
    args = _args(batch, device, torch.int32, stale=True)
    assert args[0].numel() > 2 * 4096
    _check(impls, torch_ops, args, 4, batch.num_pages, "multi-tile")


_COMPILE = """
import inspect, json, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from cpkv_kernels.ops import plan_slots as mod
names = list(inspect.signature(mod._plan_slots_kernel.fn).parameters)
signature = {n: "*i32" if n.endswith("_ptr") else "i32" for n in names}
signature.update(pages_ptr="*i64", prefix_ptr="*i64", extend_ptr="*i64")
signature.update(DEDUP="constexpr", BLOCK="constexpr")
warps = []
for dedup in (True, False):
    src = ASTSource(mod._plan_slots_kernel, signature, {"DEDUP": dedup, "BLOCK": mod.GPU_BLOCK})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": mod.GPU_WARPS})
    warps.append(k.metadata.num_warps)
print(json.dumps({"warps": warps, "expected": mod.GPU_WARPS}))
"""


@pytest.mark.slow
def test_triton_kernel_compiles_for_sm90():
    """The compiled (not interpreted) kernel builds for an H100/H200 target; no GPU needed, so
    the CPU suite catches what the interpreter lets through (types, loop-carried values)."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["warps"] == [result["expected"]] * 2
