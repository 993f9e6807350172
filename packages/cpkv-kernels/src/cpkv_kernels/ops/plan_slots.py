"""plan_slots: the slot plan of a batch (``plan_layout``'s numbering) in one program, no host sync.

The pairs of a batch are few (8 requests x 1,056 pages = 8,448 for 64K-token prefixes), so one
program scans them in tiles, in order, and carries the slot count from tile to tile; barriers
separate the passes. The ``(B + 1, num_pages)`` buffer is first filled with -1: rows ``0..B-1``
become the inverse (and count a request's uses of each page on the way, to find duplicates); row
``B`` is scratch that records each page's first read-only use as ``pairs - flat index`` under
``atomic_max`` (the largest value is the earliest use; -1 = none).
"""

from __future__ import annotations

import triton
import triton.language as tl
from cpkv_runtime._contract import OP_SPECS

from .._bytes import next_pow2
from .._plan_workspace import split_workspace
from ._register import triton_op

#: The Triton planner's own form of the contract's ``plan_slots``: no results, the outputs written
#: into ``workspace`` (``workspace_size(B, M, max_slots)`` int32: pages, lengths, slot table, slot
#: page and owner, info, split by ``cpkv_kernels._plan_workspace``) and ``inverse`` ((B + 1,
#: num_pages) int32: rows ``0..B-1`` the inverse, row ``B`` the kernel's scratch).
SCHEMA = (
    OP_SPECS["plan_slots"].triton_schema().split(") ->")[0]
    + ", Tensor(a7!) workspace, Tensor(a8!) inverse) -> ()"
)
GPU_BLOCK, GPU_WARPS = 4096, 16  # pairs per tile: 8,448 pairs take three tiles per pass
CPU_BLOCK = 1 << 16  # interpreted: one wide tile is one numpy call per op


@triton.jit
def _floordiv(a, d):
    """``floor(a / d)`` for int64 ``a`` and ``d > 0`` (``//`` truncates toward zero)."""
    q = a // d
    return tl.where((a < 0) & (q * d != a), q - 1, q)


@triton.jit
def _pair(f, pairs, pages_ptr, prefix_ptr, extend_ptr, width, num_pages, page_size):
    """Flat pair indices ``f`` -> (in range, request, page, used, valid, written)."""
    ok = f < pairs
    b = f // width
    j = f - b * width
    page = tl.load(pages_ptr + f, mask=ok, other=-1).to(tl.int64)
    prefix = tl.load(prefix_ptr + b, mask=ok, other=0).to(tl.int64)
    extend = tl.load(extend_ptr + b, mask=ok, other=0).to(tl.int64)
    used = ok & (j < _floordiv(prefix + extend + page_size - 1, page_size))
    valid = used & (page >= 0) & (page < num_pages)
    written = used & (extend > 0) & (j >= _floordiv(prefix, page_size))
    return ok, b, page, used, valid, written


# Nothing is specialised on: not the sizes, and not the outputs' 16-byte alignment (they are views
# at batch-dependent offsets of one workspace; specialising would compile a variant per batch).
@triton.jit(
    do_not_specialize=[
        "bsz", "width", "num_pages", "max_slots", "page_size", "pages_out_ptr", "lens_ptr",
        "table_ptr", "slot_page_ptr", "slot_owner_ptr", "info_ptr",
    ]
)  # fmt: skip
def _plan_slots_kernel(
    pages_ptr,
    prefix_ptr,
    extend_ptr,
    bsz,
    width,
    num_pages,
    max_slots,
    page_size,
    pages_out_ptr,
    lens_ptr,
    table_ptr,
    slot_page_ptr,
    slot_owner_ptr,
    info_ptr,
    inv_ptr,
    DEDUP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One program: lengths, first uses, slot numbers in scan order, inverse, padding, status.

    Status bits and every output: ``cpkv_runtime`` torch backend, ``plan_slots`` (the contract
    in ``cpkv_runtime._backend``). Loads of cells other threads wrote (atomics, earlier passes)
    bypass L1 (``.cg``). The atomics are relaxed: the barriers between passes order them (the
    default, acq_rel, puts a fence around every one).
    """
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    pairs = bsz.to(tl.int64) * width
    scratch = inv_ptr + bsz.to(tl.int64) * num_pages
    status = tl.full([], 0, tl.int32)
    tokens = tl.full([], 0, tl.int64)
    for b0 in range(0, bsz, BLOCK):  # pass 0: lengths
        b = b0 + lanes
        ok = b < bsz
        prefix = tl.load(prefix_ptr + b, mask=ok, other=0).to(tl.int64)
        extend = tl.load(extend_ptr + b, mask=ok, other=0).to(tl.int64)
        seq = prefix + extend
        used_pages = _floordiv(seq + page_size - 1, page_size)
        tl.store(lens_ptr + b, prefix.to(tl.int32), mask=ok)
        tl.store(lens_ptr + bsz + b, extend.to(tl.int32), mask=ok)
        tl.store(lens_ptr + 2 * bsz + b, seq.to(tl.int32), mask=ok)
        tl.store(lens_ptr + 3 * bsz + b, used_pages.to(tl.int32), mask=ok)
        negative = ok & ((prefix < 0) | (extend < 0))
        status = status | tl.max(negative.to(tl.int32), 0)
        status = status | (2 * tl.max((ok & (used_pages > width)).to(tl.int32), 0))
        tokens += tl.sum(tl.where(ok, extend, 0), 0)
    for f0 in range(0, pairs, BLOCK):  # pass 1: cleaned pages, per-request counts, first uses
        f = f0 + lanes
        ok, b, page, used, valid, written = _pair(
            f, pairs, pages_ptr, prefix_ptr, extend_ptr, width, num_pages, page_size
        )
        tl.store(pages_out_ptr + f, tl.where(used, page, -1).to(tl.int32), mask=ok)
        tl.atomic_add(inv_ptr + b * num_pages + page, 1, mask=valid, sem="relaxed")
        if DEDUP:
            read_only = valid & ~written
            tl.atomic_max(scratch + page, (pairs - f).to(tl.int32), mask=read_only, sem="relaxed")
        status = status | (4 * tl.max((used & ~valid).to(tl.int32), 0))
    tl.debug_barrier()
    carry = tl.full([], 0, tl.int64)
    for f0 in range(0, pairs, BLOCK):  # pass 2: pairs that open a slot, numbered in scan order
        f = f0 + lanes
        ok, b, page, used, valid, written = _pair(
            f, pairs, pages_ptr, prefix_ptr, extend_ptr, width, num_pages, page_size
        )
        uses = tl.load(inv_ptr + b * num_pages + page, mask=valid, other=-1, cache_modifier=".cg")
        status = status | (8 * tl.max((valid & (uses > 0)).to(tl.int32), 0))
        opens = valid
        if DEDUP:
            read_only = valid & ~written
            mark = tl.load(scratch + page, mask=read_only, other=0, cache_modifier=".cg")
            opens = valid & (written | (pairs - mark.to(tl.int64) == f))
        slot = carry + tl.cumsum(opens.to(tl.int64), 0) - 1
        fits = opens & (slot < max_slots)
        tl.store(table_ptr + f, tl.where(fits, slot, -1).to(tl.int32), mask=opens)
        tl.store(slot_page_ptr + slot, page.to(tl.int32), mask=fits)
        tl.store(slot_owner_ptr + slot, tl.where(written, b, -1).to(tl.int32), mask=fits)
        carry += tl.sum(opens.to(tl.int64), 0)
    tl.debug_barrier()
    for f0 in range(0, pairs, BLOCK):  # pass 3: shared slots of read-only pairs, the inverse
        f = f0 + lanes
        ok, b, page, used, valid, written = _pair(
            f, pairs, pages_ptr, prefix_ptr, extend_ptr, width, num_pages, page_size
        )
        slot = tl.load(table_ptr + f, mask=valid, other=-1, cache_modifier=".cg")
        if DEDUP:
            read_only = valid & ~written
            mark = tl.load(scratch + page, mask=read_only, other=0, cache_modifier=".cg")
            first = pairs - mark.to(tl.int64)
            borrows = read_only & (first != f)
            shared = tl.load(table_ptr + first, mask=borrows, other=-1, cache_modifier=".cg")
            slot = tl.where(borrows, shared, slot)
        slot = tl.where(valid, slot, -1)
        tl.store(table_ptr + f, slot, mask=ok)
        tl.store(inv_ptr + b * num_pages + page, slot, mask=valid)
    for s0 in range(0, max_slots, BLOCK):  # pass 4: padding slots
        s = s0 + lanes
        pad = (s < max_slots) & (s >= carry)
        tl.store(slot_page_ptr + s, tl.full([BLOCK], -1, tl.int32), mask=pad)
        tl.store(slot_owner_ptr + s, tl.full([BLOCK], -1, tl.int32), mask=pad)
    status = status | tl.where(carry > max_slots, 16, 0)
    tl.store(info_ptr, carry.to(tl.int32))
    tl.store(info_ptr + 1, status)
    tl.store(info_ptr + 2, tokens.to(tl.int32))


def launch_plan_slots(
    req_pages, prefix_lens, extend_lens, page_size, num_pages, max_slots, dedup, workspace, inverse
) -> None:
    """Plan the slots of a batch into ``workspace`` and ``inverse``: fill ``inverse`` with -1
    and run the kernel (arguments: :data:`SCHEMA`): the launcher under
    ``cpkv::plan_slots_triton``."""
    bsz, width = req_pages.shape
    inverse.fill_(-1)
    ws = split_workspace(workspace, bsz, width, max_slots)
    block = GPU_BLOCK if workspace.device.type != "cpu" else min(CPU_BLOCK, next_pow2(bsz * width))
    _plan_slots_kernel[(1,)](
        req_pages.contiguous(),
        prefix_lens.contiguous(),
        extend_lens.contiguous(),
        bsz,
        width,
        num_pages,
        max_slots,
        page_size,
        *ws,
        inverse,
        DEDUP=bool(dedup),
        BLOCK=max(block, 16),
        num_warps=GPU_WARPS if workspace.device.type != "cpu" else 4,
    )


plan_slots_triton = triton_op("plan_slots", launch_plan_slots, schema=SCHEMA)
