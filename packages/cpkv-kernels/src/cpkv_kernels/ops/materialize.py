"""materialize: gather pool pages into the dense buffer, ``dense[s] = kv_pool[slot_page[s]]``."""

from __future__ import annotations

import triton
import triton.language as tl

from .._bytes import as_words, byte_rows, copy_words
from ._launch import tile_2d, tile_budget
from ._register import triton_op


# Sizes are not specialised on (one compiled variant per row format, not per batch).
@triton.jit(do_not_specialize=["num_pages", "num_slots"])
def _materialize_kernel(
    pool_ptr,
    pool_stride,
    num_pages,
    slot_page_ptr,
    dense_ptr,
    dense_stride,
    num_slots,
    page_vecs,
    VEC: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """Copy ROWS slots x COLS words: ``dense[s, w] = pool[slot_page[s], w]``.

    Pages are opaque words; ``VEC`` consecutive words are 16-byte aligned in both buffers, so the
    compiler can use 16-byte accesses. Slots whose page is -1 (or outside the pool) are left
    untouched. Offsets are int64. Reference: ``cpkv_runtime`` torch backend, ``materialize``.
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    row_ok = rows < num_slots
    page = tl.load(slot_page_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    row_ok = row_ok & (page >= 0) & (page < num_pages)
    mask = row_ok[:, None] & (cols < page_vecs * VEC)[None, :]
    src = tl.multiple_of(page * pool_stride, VEC)
    dst = tl.multiple_of(rows * dense_stride, VEC)
    vals = tl.load(pool_ptr + (src[:, None] + cols[None, :]), mask=mask)
    tl.store(dense_ptr + (dst[:, None] + cols[None, :]), vals, mask=mask)


def launch_materialize(kv_pool, slot_page, out) -> None:
    """Copy pool pages into ``out`` (arguments: the contract's ``materialize``; -1 pages leave
    their slot untouched): the launcher under ``cpkv::materialize_triton``, called bare in
    per-layer loops (``cpkv_runtime.LayerStep``), where a custom-op call adds dispatcher time to
    every launch."""
    num_slots = slot_page.shape[0]
    pool, dense = byte_rows(kv_pool, "kv_pool"), byte_rows(out, "out")
    if num_slots == 0 or pool.row_bytes == 0:
        return
    width, vec = copy_words(pool.row_bytes, pool, dense)
    page_words = pool.row_bytes // width
    rows, cols = tile_2d(num_slots, page_words, tile_budget(out))
    grid = (triton.cdiv(num_slots, rows), triton.cdiv(page_words, cols))
    _materialize_kernel[grid](
        as_words(pool, width),
        pool.stride // width,
        kv_pool.shape[0],
        slot_page.contiguous(),
        as_words(dense, width),
        dense.stride // width,
        num_slots,
        page_words // vec,
        VEC=vec,
        ROWS=rows,
        COLS=cols,
        num_warps=4,
    )


materialize_triton = triton_op("materialize", launch_materialize)
