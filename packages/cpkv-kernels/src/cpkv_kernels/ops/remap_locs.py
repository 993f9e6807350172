"""remap_locs: pool locations (or top-k indices) -> dense locations, per request; -1 kept."""

from __future__ import annotations

import triton
import triton.language as tl

from ._launch import tile_2d, tile_budget
from ._register import triton_op


# Sizes are not specialised on (one compiled variant per row format, not per batch).
@triton.jit(do_not_specialize=["num_reqs", "num_pages", "num_rows"])
def _remap_locs_kernel(
    locs_ptr,
    req_ptr,
    inv_ptr,
    num_reqs,
    num_pages,
    out_ptr,
    num_rows,
    num_cols,
    PAGE: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """``out[n, k] = inverse[req_id[n], loc // P] * P + loc % P`` for loc = locs[n, k].

    -1 stays -1; a request id outside ``[0, B)``, a page outside the pool or a page the request
    does not use (inverse -1) gives -1. Reference: ``cpkv_runtime`` torch backend, ``remap_locs``.
    """
    n = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    k = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    n_ok = n < num_rows
    mask = n_ok[:, None] & (k < num_cols)[None, :]
    offs = n[:, None] * num_cols + k[None, :]
    loc = tl.load(locs_ptr + offs, mask=mask, other=-1)
    req = tl.load(req_ptr + n, mask=n_ok, other=-1).to(tl.int64)
    req_ok = (req >= 0) & (req < num_reqs)
    page = loc // PAGE
    ok = mask & (loc >= 0) & req_ok[:, None] & (page < num_pages)
    slot = tl.load(inv_ptr + (req[:, None] * num_pages + page), mask=ok, other=-1)
    dense_loc = slot * PAGE + (loc - page * PAGE).to(tl.int32)
    tl.store(out_ptr + offs, tl.where(slot >= 0, dense_loc, -1).to(tl.int32), mask=mask)


def launch_remap_locs(locs, req_id, inverse, page_size, out) -> None:
    """Remap pool locations into dense locations (arguments: the contract's ``remap_locs``): the
    launcher under ``cpkv::remap_locs_triton``, called bare in per-layer loops
    (``cpkv_runtime.LayerStep``)."""
    num_rows = locs.shape[0]
    num_cols = locs.shape[1] if locs.dim() == 2 else 1
    if num_rows == 0 or num_cols == 0:
        return
    rows, cols = tile_2d(num_rows, num_cols, tile_budget(out), max_cols=1024)
    grid = (triton.cdiv(num_rows, rows), triton.cdiv(num_cols, cols))
    _remap_locs_kernel[grid](
        locs.contiguous(),
        req_id.contiguous(),
        inverse.contiguous(),
        inverse.shape[0],
        inverse.shape[1],
        out,
        num_rows,
        num_cols,
        PAGE=page_size,
        ROWS=rows,
        COLS=cols,
        num_warps=4,
    )


remap_locs_triton = triton_op("remap_locs", launch_remap_locs)
