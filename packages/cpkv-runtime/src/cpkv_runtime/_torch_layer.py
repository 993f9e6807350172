"""The torch definitions of the one-pass dense build: ``fill_sources`` and ``build_dense``.

``materialize`` then ``fill_current`` writes the rows of private slots twice (pool bytes, then the
current KV over them) and must run in that order. ``fill_sources`` resolves, once per forward,
which current row lands in each dense row; ``build_dense`` then writes every dense row once, from
the current KV where a source is named and from the pool otherwise, so a kernel needs no ordering
between the two copies and the per-layer sequence is one launch shorter. Vectorised, no host sync
(contract: ``_backend.py``).
"""

from __future__ import annotations

import math

import torch

from ._bytes import word_rows

__all__ = ["build_dense", "fill_sources"]


def fill_sources(
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    num_slots: int,
) -> torch.Tensor:
    """The current row that ``fill_current`` writes into each dense row, -1 where none does.

    Args:
        token_req: (T,) request of each current row (any value on padding rows).
        out_cache_loc: (T,) int32/int64 pool location, -1 = padding row.
        inverse: (B, num_pages) int32.
        page_size: P.
        num_slots: S, the dense buffer's slots.

    Returns:
        sources: (S, P) int32; the largest ``t`` where several rows name one dense row (the row
        a sequential scatter leaves; validated input never has two).
    """
    bsz, num_pages = inverse.shape
    device = inverse.device
    # One trash cell past the end takes every skipped row: no boolean indexing, no host sync.
    flat = torch.full((num_slots * page_size + 1,), -1, dtype=torch.int64, device=device)
    tokens = token_req.shape[0]
    if tokens and bsz and num_slots:
        loc, req = out_cache_loc.long(), token_req.long()
        page = torch.div(loc, page_size, rounding_mode="floor")
        offset = loc - page * page_size
        ok = (loc >= 0) & (req >= 0) & (req < bsz) & (page < num_pages)
        slot = inverse[req.clamp(0, bsz - 1), page.clamp(0, num_pages - 1)].long()
        ok &= (slot >= 0) & (slot < num_slots)
        target = torch.where(ok, slot * page_size + offset, num_slots * page_size)
        rows = torch.arange(tokens, device=device)
        flat.scatter_reduce_(0, target, rows, reduce="amax")  # max(-1, t): the largest t wins
    return flat[:-1].view(num_slots, page_size).int()


def _rows(x: torch.Tensor, lead: int) -> torch.Tensor:
    """``x`` as ``(*x.shape[:lead], row_bytes)`` uint8, sharing storage (rows contiguous)."""
    es = x.element_size()
    width = math.prod(x.shape[lead:]) * es
    raw = x.unsqueeze(-1).view(torch.uint8)
    strides = tuple(s * es for s in x.stride()[:lead])
    return raw.as_strided((*x.shape[:lead], width), (*strides, 1), raw.storage_offset())


def _word_views(
    kv_pool: torch.Tensor, current_kv: torch.Tensor, out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pool ``(N, P, W)``, current ``(T, W)`` and dense ``(S, P, W)`` rows as one word type."""
    views = (word_rows(kv_pool, 2), word_rows(current_kv, 1), word_rows(out, 2))
    if all(v is not None for v in views) and len({v.dtype for v in views}) == 1:
        return views  # type: ignore[return-value]
    return _rows(kv_pool, 2), _rows(current_kv, 1), _rows(out, 2)


def build_dense(
    kv_pool: torch.Tensor,
    slot_page: torch.Tensor,
    current_kv: torch.Tensor,
    sources: torch.Tensor,
    used_slots: torch.Tensor | None,
    out: torch.Tensor,
) -> None:
    """``out[s, r]`` = ``current_kv[sources[s, r]]``, else ``kv_pool[slot_page[s], r]``, else kept.

    Args:
        kv_pool: (num_pages, P, *row) any dtype, rows contiguous. Read-only.
        slot_page: (S,) int32/int64 source pool page of each slot, -1 = none.
        current_kv: (T, *row) of kv_pool's dtype, rows contiguous. Read-only.
        sources: (S, P) int32 from :func:`fill_sources`.
        used_slots: None, or (1,) int32 on the device: slots from ``used_slots[0]`` on are left
            as they are.
        out: (S, P, *row), written.
    """
    num_slots = out.shape[0]
    if num_slots == 0 or out.numel() == 0:
        return
    device = out.device
    live = torch.ones(num_slots, dtype=torch.bool, device=device)
    if used_slots is not None:
        live = torch.arange(num_slots, device=device) < used_slots.reshape(()).long()
    pool, cur, dst = _word_views(kv_pool, current_kv, out)
    page = slot_page.long()
    result = dst
    if kv_pool.shape[0]:
        from_pool = live & (page >= 0) & (page < kv_pool.shape[0])
        pages = pool.index_select(0, page.clamp(0, kv_pool.shape[0] - 1))
        result = torch.where(from_pool.view(-1, 1, 1), pages, result)
    tokens = current_kv.shape[0]
    if tokens:
        src = sources.long()
        from_cur = live.view(-1, 1) & (src >= 0) & (src < tokens)
        rows = cur.index_select(0, src.clamp(0, tokens - 1).reshape(-1)).view(dst.shape)
        result = torch.where(from_cur.unsqueeze(-1), rows, result)
    if result is not dst:
        dst.copy_(result)
