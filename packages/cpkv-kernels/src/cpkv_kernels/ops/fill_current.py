"""fill_current: write the current chunk's KV rows into their requests' private dense slots."""

from __future__ import annotations

import triton
import triton.language as tl

from .._bytes import as_words, byte_rows, copy_words
from ._launch import tile_2d, tile_budget
from ._register import triton_op


# Sizes are not specialised on (one compiled variant per row format, not per batch).
@triton.jit(do_not_specialize=["num_slots", "num_tokens", "num_reqs", "num_pages"])
def _fill_current_kernel(
    dense_ptr,
    dense_stride,
    num_slots,
    src_ptr,
    src_stride,
    num_tokens,
    row_vecs,
    token_req_ptr,
    loc_ptr,
    inv_ptr,
    num_reqs,
    num_pages,
    PAGE: tl.constexpr,
    VEC: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """``dense[inverse[token_req[t], loc // P], loc % P] = current_kv[t]``, loc = out_cache_loc[t].

    Rows with loc < 0 (padding), a request id outside ``[0, B)``, a page outside the pool or a page
    the request does not use (inverse -1) are skipped. Rows are opaque words; ``VEC`` consecutive
    words are 16-byte aligned on both sides. Reference: ``cpkv_runtime`` torch backend,
    ``fill_current``.
    """
    t = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    t_ok = t < num_tokens
    loc = tl.load(loc_ptr + t, mask=t_ok, other=-1).to(tl.int64)
    req = tl.load(token_req_ptr + t, mask=t_ok, other=-1).to(tl.int64)
    ok = t_ok & (loc >= 0) & (req >= 0) & (req < num_reqs)
    page = loc // PAGE
    ok = ok & (page < num_pages)
    slot = tl.load(inv_ptr + req * num_pages + page, mask=ok, other=-1).to(tl.int64)
    ok = ok & (slot >= 0) & (slot < num_slots)
    row_words = row_vecs * VEC
    dst = tl.multiple_of(slot * dense_stride + (loc - page * PAGE) * row_words, VEC)
    src = tl.multiple_of(t * src_stride, VEC)
    mask = ok[:, None] & (cols < row_words)[None, :]
    vals = tl.load(src_ptr + (src[:, None] + cols[None, :]), mask=mask)
    tl.store(dense_ptr + (dst[:, None] + cols[None, :]), vals, mask=mask)


def launch_fill_current(dense, current_kv, token_req, out_cache_loc, inverse, page_size) -> None:
    """Scatter current rows into ``dense`` in place (arguments: the contract's ``fill_current``):
    the launcher under ``cpkv::fill_current_triton``, called bare in per-layer loops
    (``cpkv_runtime.LayerStep``)."""
    num_tokens = current_kv.shape[0]
    pages, rows_in = byte_rows(dense, "dense"), byte_rows(current_kv, "current_kv")
    row_bytes = rows_in.row_bytes
    if num_tokens == 0 or row_bytes == 0 or dense.shape[0] == 0:
        return
    width, vec = copy_words(row_bytes, pages, rows_in)
    row_words = row_bytes // width
    rows, cols = tile_2d(num_tokens, row_words, tile_budget(dense))
    grid = (triton.cdiv(num_tokens, rows), triton.cdiv(row_words, cols))
    _fill_current_kernel[grid](
        as_words(pages, width),
        pages.stride // width,
        dense.shape[0],
        as_words(rows_in, width),
        rows_in.stride // width,
        num_tokens,
        row_words // vec,
        token_req.contiguous(),
        out_cache_loc.contiguous(),
        inverse.contiguous(),
        inverse.shape[0],
        inverse.shape[1],
        PAGE=page_size,
        VEC=vec,
        ROWS=rows,
        COLS=cols,
        num_warps=4,
    )


fill_current_triton = triton_op("fill_current", launch_fill_current)
