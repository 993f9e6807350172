"""build_dense: materialize and fill_current in one pass that writes every dense row once."""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .._bytes import as_words, byte_rows, copy_words
from ._launch import tile_2d, tile_budget
from ._register import triton_op

WAVE_PROGRAMS_PER_SM = 8  # row programs per SM on a GPU: one wave that loops over the rows


@functools.lru_cache(maxsize=16)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Sizes are not specialised on (one compiled variant per row format, not per batch).
@triton.jit(do_not_specialize=["num_pages", "num_tokens", "num_slots"])
def _build_dense_kernel(
    pool_ptr,
    pool_stride,
    num_pages,
    slot_page_ptr,
    src_ptr,
    src_stride,
    num_tokens,
    sources_ptr,
    used_ptr,
    dense_ptr,
    dense_stride,
    num_slots,
    row_vecs,
    PAGE: tl.constexpr,
    HAS_USED: tl.constexpr,
    VEC: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """``dense[s, r] = current[sources[s, r]]`` if named, else ``pool[slot_page[s], r]``, else kept.

    Rows are opaque words; ``VEC`` consecutive words are 16-byte aligned in every buffer. The row
    programs loop over the dense rows of the slots in use: with ``HAS_USED`` the count is read
    from ``used_ptr`` on the device (``plan_layout_static``'s, far below the capacity the grid
    is sized by). Reference: ``cpkv_runtime`` torch backend, ``build_dense``.
    """
    slots = num_slots.to(tl.int64)
    if HAS_USED:
        used = tl.load(used_ptr).to(tl.int64)
        slots = tl.minimum(tl.maximum(used, 0), slots)
    total = slots * PAGE
    row_words = row_vecs * VEC
    cols = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    col_ok = (cols < row_words)[None, :]
    start = tl.program_id(0).to(tl.int64) * ROWS
    step = tl.num_programs(0).to(tl.int64) * ROWS
    for r0 in range(start, total, step):
        rows = r0 + tl.arange(0, ROWS).to(tl.int64)
        ok = rows < total
        s = rows // PAGE
        r = rows - s * PAGE
        t = tl.load(sources_ptr + rows, mask=ok, other=-1).to(tl.int64)
        p = tl.load(slot_page_ptr + s, mask=ok, other=-1).to(tl.int64)
        from_cur = ok & (t >= 0) & (t < num_tokens)
        from_pool = ok & ~from_cur & (p >= 0) & (p < num_pages)
        cur_at = tl.multiple_of(tl.where(from_cur, t, 0) * src_stride, VEC)
        pool_at = tl.multiple_of(tl.where(from_pool, p, 0) * pool_stride + r * row_words, VEC)
        dst_at = tl.multiple_of(s * dense_stride + r * row_words, VEC)
        cur = tl.load(src_ptr + (cur_at[:, None] + cols[None, :]), mask=from_cur[:, None] & col_ok)
        page = tl.load(
            pool_ptr + (pool_at[:, None] + cols[None, :]), mask=from_pool[:, None] & col_ok
        )
        vals = tl.where(from_cur[:, None], cur, page)
        write = (from_cur | from_pool)[:, None] & col_ok
        tl.store(dense_ptr + (dst_at[:, None] + cols[None, :]), vals, mask=write)


def launch_build_dense(kv_pool, slot_page, current_kv, sources, used_slots, out) -> None:
    """Write every dense row once, from the current KV where a source is named, else the pool
    (arguments: the contract's ``build_dense``): the launcher under ``cpkv::build_dense_triton``,
    called bare by ``cpkv_runtime.LayerStep``."""
    num_slots, page_size = out.shape[0], out.shape[1]
    pool, dense, cur = byte_rows(kv_pool, "kv_pool"), byte_rows(out, "out"), None
    row_bytes = dense.row_bytes // page_size if page_size else 0
    if num_slots == 0 or row_bytes == 0:
        return
    cur = byte_rows(current_kv, "current_kv")
    width, vec = copy_words(row_bytes, pool, dense, cur)
    row_words = row_bytes // width
    rows, cols = tile_2d(num_slots * page_size, row_words, tile_budget(out))
    programs = triton.cdiv(num_slots * page_size, rows)
    if out.device.type == "cuda":
        index = out.device.index if out.device.index is not None else torch.cuda.current_device()
        programs = min(programs, WAVE_PROGRAMS_PER_SM * _sm_count(index))
    _build_dense_kernel[(programs, triton.cdiv(row_words, cols))](
        as_words(pool, width),
        pool.stride // width,
        kv_pool.shape[0],
        slot_page.contiguous(),
        as_words(cur, width),
        cur.stride // width,
        current_kv.shape[0],
        sources.contiguous(),
        used_slots if used_slots is not None else slot_page,  # not read without HAS_USED
        as_words(dense, width),
        dense.stride // width,
        num_slots,
        row_words // vec,
        PAGE=page_size,
        HAS_USED=used_slots is not None,
        VEC=vec,
        ROWS=rows,
        COLS=cols,
        num_warps=4,
    )


build_dense_triton = triton_op("build_dense", launch_build_dense)
