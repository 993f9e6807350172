"""build_inverse: the per-request inverse, ``inverse[b, req_pages[b, j]] = slot_table[b, j]``."""

from __future__ import annotations

import triton
import triton.language as tl

from .._bytes import next_pow2
from ._launch import CPU_TILE, GPU_TILE
from ._register import triton_op


# Sizes are not specialised on (one compiled variant per row format, not per batch).
@triton.jit(do_not_specialize=["max_pages", "num_pages"])
def _build_inverse_kernel(
    slot_ptr,
    pages_ptr,
    max_pages,
    inv_ptr,
    num_pages,
    CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """Program (c, b) owns ``inverse[b, c*CHUNK:(c+1)*CHUNK]``.

    It writes -1 over its range, then (after a barrier, because another thread of the program may
    own the same entry in the scatter) writes ``slot_table[b, j]`` for every page of request b that
    falls in its range. One owner per entry: deterministic, no atomics. Pages outside
    ``[0, num_pages)`` are skipped. Reference: ``cpkv_runtime`` torch backend, ``build_inverse``.
    """
    b = tl.program_id(1).to(tl.int64)
    lo = tl.program_id(0).to(tl.int64) * CHUNK
    x = lo + tl.arange(0, CHUNK)
    row = inv_ptr + b * num_pages
    tl.store(row + x, tl.full([CHUNK], -1, tl.int32), mask=x < num_pages)
    tl.debug_barrier()
    for j0 in range(0, max_pages, BLOCK_M):
        j = j0 + tl.arange(0, BLOCK_M)
        jm = j < max_pages
        page = tl.load(pages_ptr + b * max_pages + j, mask=jm, other=-1).to(tl.int64)
        slot = tl.load(slot_ptr + b * max_pages + j, mask=jm, other=-1).to(tl.int32)
        hit = jm & (page >= lo) & (page < lo + CHUNK) & (page < num_pages)
        tl.store(row + page, slot, mask=hit)


def launch_build_inverse(slot_table, req_pages, num_pages, inverse) -> None:
    """Write the per-request inverse into ``inverse`` (arguments: the contract's
    ``build_inverse``): the launcher under ``cpkv::build_inverse_triton``."""
    b, m = slot_table.shape
    if b == 0 or num_pages == 0:
        return
    chunk, block_m = GPU_TILE, 1024  # fixed on a GPU: one compiled variant
    if inverse.device.type == "cpu":  # interpreted: trim the tiles to the problem
        chunk, block_m = min(next_pow2(num_pages), CPU_TILE), min(next_pow2(m), 1024)
    grid = (triton.cdiv(num_pages, chunk), b)
    _build_inverse_kernel[grid](
        slot_table.contiguous(),
        req_pages.contiguous(),
        m,
        inverse,
        num_pages,
        CHUNK=chunk,
        BLOCK_M=block_m,
        num_warps=4,
    )


build_inverse_triton = triton_op("build_inverse", launch_build_inverse)
