"""current_page_mask: which of each request's pages hold its own current tokens (request-aware)."""

from __future__ import annotations

import triton
import triton.language as tl

from ._launch import CPU_TILE, tile_2d, tile_budget
from ._register import triton_op


# Sizes are not specialised on (one compiled variant per row format, not per batch).
@triton.jit(do_not_specialize=["num_reqs", "max_pages"])
def _current_page_mask_kernel(
    prefix_ptr,
    extend_ptr,
    mask_ptr,
    num_reqs,
    max_pages,
    PAGE: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """``mask[b, j] = extend[b] > 0 and prefix[b] // P <= j < ceil((prefix[b] + extend[b]) / P)``.

    Keyed by request, not by page value: a page another request writes never hides b's history.
    Reference: ``cpkv_runtime`` torch backend, ``current_page_mask``.
    """
    b = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    j = tl.program_id(1).to(tl.int64) * COLS + tl.arange(0, COLS)
    b_ok = b < num_reqs
    prefix = tl.load(prefix_ptr + b, mask=b_ok, other=0).to(tl.int64)
    extend = tl.load(extend_ptr + b, mask=b_ok, other=0).to(tl.int64)
    first = prefix // PAGE
    end = (prefix + extend + PAGE - 1) // PAGE
    hit = (extend > 0)[:, None] & (j[None, :] >= first[:, None]) & (j[None, :] < end[:, None])
    tl.store(
        mask_ptr + (b[:, None] * max_pages + j[None, :]),
        hit,
        mask=b_ok[:, None] & (j < max_pages)[None, :],
    )


def launch_current_page_mask(req_pages, prefix_lens, extend_lens, page_size, mask) -> None:
    """Write the request-aware current-page mask (arguments: the contract's
    ``current_page_mask``; only ``req_pages``' shape is read): the launcher under
    ``cpkv::current_page_mask_triton``."""
    num_reqs, max_pages = req_pages.shape
    if num_reqs == 0 or max_pages == 0:
        return
    budget = tile_budget(mask)
    width = max_pages if budget == CPU_TILE else 1024  # one compiled variant on a GPU
    rows, cols = tile_2d(num_reqs, width, budget, max_cols=1024)
    grid = (triton.cdiv(num_reqs, rows), triton.cdiv(max_pages, cols))
    _current_page_mask_kernel[grid](
        prefix_lens.contiguous(),
        extend_lens.contiguous(),
        mask,
        num_reqs,
        max_pages,
        PAGE=page_size,
        ROWS=rows,
        COLS=cols,
        num_warps=4,
    )


current_page_mask_triton = triton_op("current_page_mask", launch_current_page_mask)
