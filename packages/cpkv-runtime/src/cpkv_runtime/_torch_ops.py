"""The torch backend: the definition of every op in the backend contract (see ``_backend.py``).

Vectorised torch on CPU and CUDA alike, no Python loop over tokens or pages. These functions trust
their inputs (the public wrappers in ``_ops.py`` validate); Triton and CUDA backends must match them
bitwise.
"""

from __future__ import annotations

import torch

from ._backend import Backend
from ._bytes import word_rows
from ._torch_layer import build_dense, fill_sources
from ._torch_plan import plan_slots
from ._torch_shard import shard_plan

__all__ = ["TORCH_BACKEND", "materialize_padded"]


def build_inverse(
    slot_table: torch.Tensor, req_pages: torch.Tensor, num_pages: int
) -> torch.Tensor:
    """``inverse[b, req_pages[b, j]] = slot_table[b, j]`` for every used ``(b, j)``, else -1.

    Args:
        slot_table: (B, M) int32 slot of request b's j-th page, -1 past its pages.
        req_pages: (B, M) int32/int64 pool page of request b's j-th page, -1 past its pages.
        num_pages: pool size.

    Returns:
        inverse: (B, num_pages) int32.
    """
    bsz = slot_table.shape[0]
    device = slot_table.device
    # One trash cell past the end takes the unused (b, j): no boolean mask, no host sync.
    flat = torch.full((bsz * num_pages + 1,), -1, dtype=torch.int32, device=device)
    used = (req_pages >= 0) & (slot_table >= 0)
    rows = torch.arange(bsz, device=device, dtype=torch.int64).unsqueeze(1) * num_pages
    target = torch.where(used, rows + req_pages.long(), bsz * num_pages)
    flat.index_put_((target.reshape(-1),), slot_table.reshape(-1).to(torch.int32))
    flat[-1] = -1
    return flat[:-1].view(bsz, num_pages)


def materialize(
    kv_pool: torch.Tensor, slot_page: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``dense[s] = kv_pool[slot_page[s]]``: copy whole pages, rows as opaque words.

    Args:
        kv_pool: (num_pages, P, *row) any dtype, read-only.
        slot_page: (S,) int32/int64 source page of each slot.
        out: optional (S, P, *row) of kv_pool's dtype, written.

    Returns:
        dense: (S, P, *row), ``out`` when given.
    """
    if out is None:
        out = torch.empty(
            (slot_page.shape[0], *kv_pool.shape[1:]), dtype=kv_pool.dtype, device=kv_pool.device
        )
    src, dst = word_rows(kv_pool, 1), word_rows(out, 1)
    index = slot_page.long()
    if src is not None and dst is not None and src.dtype == dst.dtype:
        torch.index_select(src, 0, index, out=dst)
    else:  # strided pages: dtype-level copy (still no arithmetic on the values)
        out.copy_(kv_pool.index_select(0, index))
    return out


def materialize_padded(
    kv_pool: torch.Tensor, slot_page: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """:func:`materialize` for padded slot lists (``plan_layout_static``): -1 slots untouched.

    The kernels skip -1 slots natively; here the padding rows are read back and rewritten
    (``out[s] = out[s]``) so that no host sync is needed to find them.

    Args:
        kv_pool: (num_pages, P, *row) any dtype, read-only.
        slot_page: (S,) int32/int64 source page of each slot, -1 = padding (left untouched).
        out: (S, P, *row) of kv_pool's dtype, written where ``slot_page >= 0``.
    """
    keep = (slot_page >= 0).view(-1, *([1] * (out.dim() - 1)))
    pages = kv_pool.index_select(0, slot_page.long().clamp(min=0))
    src, dst = word_rows(pages, 1), word_rows(out, 1)
    if src is not None and dst is not None and src.dtype == dst.dtype:
        torch.where(keep.view(-1, 1), src, dst, out=dst)
    else:
        out.copy_(torch.where(keep, pages, out))
    return out


def _dense_rows(
    locs: torch.Tensor, req: torch.Tensor, inverse: torch.Tensor, page_size: int
) -> torch.Tensor:
    """``inverse[req, loc // P] * P + loc % P`` in locs' dtype, -1 where loc or the slot is -1.

    ``req`` broadcasts against ``locs`` (``(N, 1)`` for ``(N, K)`` locations). Stays in int32 for
    int32 locations: dense rows ``slot * P + offset`` fit while the dense buffer has < 2^31 rows.
    """
    if inverse.shape[0] == 0:  # an empty batch: nothing is anywhere
        return torch.full_like(locs, -1)
    page = torch.div(locs, page_size, rounding_mode="floor")
    offset = locs - page * page_size
    req = req.long().clamp(0, inverse.shape[0] - 1)  # padding rows may carry any request
    slot = inverse[req, page.clamp_(0, inverse.shape[1] - 1)].to(locs.dtype)
    return torch.where((locs >= 0) & (slot >= 0), slot * page_size + offset, -1)


def fill_current(
    dense: torch.Tensor,
    current_kv: torch.Tensor,
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
) -> None:
    """``dense[inverse[token_req[t], loc // P], loc % P] = current_kv[t]``; rows with loc -1 skip.

    Args:
        dense: (S, P, *row) written in place.
        current_kv: (T, *row) same dtype as dense, read-only.
        token_req: (T,) request of each token (any value on padding rows).
        out_cache_loc: (T,) int32/int64 pool location, -1 = padding row.
        inverse: (B, num_pages) int32.
        page_size: P.
    """
    if current_kv.shape[0] == 0:
        return
    rows = _dense_rows(out_cache_loc.long(), token_req, inverse, page_size)
    keep = torch.nonzero(rows >= 0).squeeze(1)
    src = current_kv
    if keep.shape[0] != rows.shape[0]:  # padding rows present: drop them (else no extra copy)
        rows, src = rows[keep], current_kv.index_select(0, keep)
    if dense.stride(0) != dense.shape[1] * dense.stride(1):  # pages not evenly spaced
        dense.index_put_((rows // page_size, rows % page_size), src)
        return
    flat = dense.view(-1, *dense.shape[2:])
    dst_w, src_w = word_rows(flat, 1), word_rows(src, 1)
    if dst_w is not None and src_w is not None and dst_w.dtype == src_w.dtype:
        dst_w.index_copy_(0, rows, src_w)
    else:
        flat.index_copy_(0, rows, src)


def remap_locs(
    locs: torch.Tensor,
    req_id: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pool locations -> the request's dense locations: ``inverse[b, loc // P] * P + loc % P``.

    Args:
        locs: (N,) or (N, K) int32/int64 pool locations, -1 = absent.
        req_id: (N,) request of each row.
        inverse: (B, num_pages) int32.
        page_size: P.
        out: optional int32 tensor of locs' shape, written.

    Returns:
        int32 of locs' shape; -1 stays -1 and a page the request does not use maps to -1.
    """
    req = req_id.reshape(-1, *([1] * (locs.dim() - 1)))
    result = _dense_rows(locs, req, inverse, page_size).to(torch.int32)
    if out is None:
        return result
    return out.copy_(result)


def current_page_mask(
    req_pages: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    page_size: int,
) -> torch.Tensor:
    """True where request b's j-th page holds any of b's current tokens.

    Args:
        req_pages: (B, M) pool pages (only the shape is read: the mask is keyed by (b, j), never
            by page value).
        prefix_lens, extend_lens: (B,) token counts.
        page_size: P.

    Returns:
        bool (B, M): ``extend_lens[b] > 0 and prefix_lens[b] // P <= j < ceil(seq_lens[b] / P)``.
    """
    j = torch.arange(req_pages.shape[1], device=req_pages.device).unsqueeze(0)
    prefix = prefix_lens.long().unsqueeze(1)
    seq = prefix + extend_lens.long().unsqueeze(1)
    first = torch.div(prefix, page_size, rounding_mode="floor")
    end = torch.div(seq + page_size - 1, page_size, rounding_mode="floor")
    return (j >= first) & (j < end) & (seq > prefix)


def layer_step(
    kv_pool: torch.Tensor,
    slot_page: torch.Tensor,
    current_kv: torch.Tensor,
    sources: torch.Tensor,
    used_slots: torch.Tensor | None,
    dense: torch.Tensor,
    locs: torch.Tensor,
    row_req: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    dense_locs: torch.Tensor,
) -> None:
    """One layer: :func:`build_dense` into ``dense``, then :func:`remap_locs` into ``dense_locs``.

    Args: those of ``build_dense`` (``dense`` is its ``out``), then those of ``remap_locs``
    (``row_req`` is its ``req_id``, ``dense_locs`` its ``out``).
    """
    build_dense(kv_pool, slot_page, current_kv, sources, used_slots, dense)
    remap_locs(locs, row_req, inverse, page_size, dense_locs)


TORCH_BACKEND = Backend(
    name="torch",
    ops={
        "build_inverse": build_inverse,
        "materialize": materialize,
        "fill_current": fill_current,
        "remap_locs": remap_locs,
        "current_page_mask": current_page_mask,
        "plan_slots": plan_slots,
        "fill_sources": fill_sources,
        "build_dense": build_dense,
        "layer_step": layer_step,
        "shard_plan": shard_plan,
    },
    devices=frozenset({"cpu", "cuda", "meta", "mps", "xpu"}),
)
