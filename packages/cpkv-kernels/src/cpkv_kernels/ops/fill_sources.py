"""fill_sources: the current row that ``fill_current`` writes into each dense row, per forward."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._register import triton_op

GPU_BLOCK = 1024  # tokens per program
CPU_BLOCK = 1 << 14  # interpreted: one wide tile is one numpy call per op


# Sizes are not specialised on (one compiled variant per page size, not per batch).
@triton.jit(do_not_specialize=["num_tokens", "num_reqs", "num_pages", "num_slots"])
def _fill_sources_kernel(
    token_req_ptr,
    loc_ptr,
    inv_ptr,
    sources_ptr,
    num_tokens,
    num_reqs,
    num_pages,
    num_slots,
    PAGE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``sources[inverse[token_req[t], loc // P], loc % P] = max(.., t)``, loc = out_cache_loc[t].

    Rows ``fill_current`` skips are skipped: loc < 0 (padding), a request outside ``[0, B)``, a
    page outside the pool, an inverse entry -1 or ``>= num_slots``. Where two rows name one dense
    row the larger ``t`` stays. Reference: ``cpkv_runtime`` torch backend, ``fill_sources``.
    """
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = t < num_tokens
    loc = tl.load(loc_ptr + t, mask=ok, other=-1).to(tl.int64)
    req = tl.load(token_req_ptr + t, mask=ok, other=-1).to(tl.int64)
    ok = ok & (loc >= 0) & (req >= 0) & (req < num_reqs)
    page = loc // PAGE
    ok = ok & (page < num_pages)
    slot = tl.load(inv_ptr + req * num_pages + page, mask=ok, other=-1).to(tl.int64)
    ok = ok & (slot >= 0) & (slot < num_slots)
    cell = slot * PAGE + (loc - page * PAGE)
    tl.atomic_max(sources_ptr + cell, t.to(tl.int32), mask=ok, sem="relaxed")  # no ordering


def launch_fill_sources(token_req, out_cache_loc, inverse, page_size, num_slots) -> torch.Tensor:
    """Which current row lands in each dense row (arguments: the contract's ``fill_sources``;
    returns a new (S, P) int32 tensor, -1 = no current row): the launcher under
    ``cpkv::fill_sources_triton``, called bare by ``cpkv_runtime.prepare_layer_step``."""
    sources = torch.full((num_slots, page_size), -1, dtype=torch.int32, device=inverse.device)
    num_tokens = token_req.shape[0]
    if num_tokens == 0 or sources.numel() == 0 or inverse.shape[0] == 0:
        return sources
    block = GPU_BLOCK if inverse.device.type != "cpu" else CPU_BLOCK
    _fill_sources_kernel[(triton.cdiv(num_tokens, block),)](
        token_req.contiguous(),
        out_cache_loc.contiguous(),
        inverse.contiguous(),
        sources,
        num_tokens,
        inverse.shape[0],
        inverse.shape[1],
        num_slots,
        PAGE=page_size,
        BLOCK=block,
        num_warps=4,
    )
    return sources


fill_sources_triton = triton_op("fill_sources", launch_fill_sources)
