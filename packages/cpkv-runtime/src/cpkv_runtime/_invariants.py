"""Invariant checker: invariant 1 (every row right) and 2 (one owner per written slot).

Used by tests on every backend and by ``CPKV_DEBUG=1`` after every op. Vectorised; it reads every
row it checks, so it costs about one extra copy of the data.
"""

from __future__ import annotations

import torch
from cpkv_cli.environment import CPKV_DEBUG

from ._bytes import byte_rows
from ._checks import first_true
from ._layout import Layout, current_tokens
from ._torch_ops import current_page_mask as current_page_mask_torch
from .errors import InvariantError, LayoutError

__all__ = ["check_invariants", "debug_enabled"]


def debug_enabled() -> bool:
    """``CPKV_DEBUG`` is on (1/true/yes/on; 0/false/no/off or unset: off).

    Raises:
        LayoutError: any other value (a command refuses it at start instead).
    """
    return CPKV_DEBUG.read(error=LayoutError)


def _check_structure(layout: Layout) -> None:
    """Slot table, inverse, owners and sharing agree with each other (invariant 2 included)."""
    page_size, bsz = layout.page_size, layout.batch_size
    j = torch.arange(layout.max_pages, device=layout.device).unsqueeze(0)
    used = j < layout.pages_used.unsqueeze(1)
    bad = first_true(used != (layout.slot_table >= 0)) or first_true(
        used != (layout.req_pages >= 0)
    )
    if bad is not None:
        raise InvariantError(f"slot_table/req_pages at (b={bad[0]}, j={bad[1]}) disagree with use")
    b_of = torch.arange(bsz, device=layout.device).unsqueeze(1).expand_as(used)[used].long()
    slot = layout.slot_table[used].long()
    page = layout.req_pages[used].long()
    if slot.numel() and (slot.max() >= layout.num_slots):
        raise InvariantError(f"slot_table names slot {int(slot.max())} of {layout.num_slots}")
    bad = first_true(layout.slot_page.long()[slot] != page)
    if bad is not None:
        k = bad[0]
        raise InvariantError(
            f"request {int(b_of[k])} page {int(page[k])} maps to slot {int(slot[k])}, whose "
            f"source page is {int(layout.slot_page[slot[k]])}"
        )
    bad = first_true(layout.inverse.long()[b_of, page] != slot)
    if bad is None and int((layout.inverse >= 0).sum()) != slot.numel():
        raise InvariantError("inverse holds entries for pages no request uses")
    if bad is not None:
        k = bad[0]
        raise InvariantError(
            f"inverse[{int(b_of[k])}, {int(page[k])}] = "
            f"{int(layout.inverse[b_of[k], page[k]])}, slot_table says {int(slot[k])}"
        )
    uses = torch.bincount(slot, minlength=layout.num_slots)
    written = current_page_mask_torch(
        layout.req_pages, layout.prefix_lens, layout.extend_lens, page_size
    )[used]
    owner = layout.slot_owner.long()[slot]
    bad = first_true(
        torch.where(written, owner != b_of, owner != -1) | (written & (uses[slot] > 1))
    )
    if bad is not None:  # invariant 2
        k = bad[0]
        raise InvariantError(
            f"invariant 2: request {int(b_of[k])} {'writes' if written[k] else 'reads'} page "
            f"{int(page[k])} through slot {int(slot[k])}, owned by {int(owner[k])} and used by "
            f"{int(uses[slot[k]])} (request, page) pairs; a written slot has exactly one owner"
        )
    if first_true(uses == 0) is not None:
        raise InvariantError(f"slot {first_true(uses == 0)[0]} is used by no (request, page)")
    if layout.dedup:
        shared = layout.slot_page[layout.slot_owner < 0]
        if torch.unique(shared).numel() != shared.numel():
            raise InvariantError("dedup is on but one pool page has two read-only slots")


def _history_rows(layout: Layout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """((b, position) stacked, dense row, pool row) for every history position of every request."""
    prefix = layout.prefix_lens.long()
    b = torch.repeat_interleave(torch.arange(layout.batch_size, device=layout.device), prefix)
    pos = torch.arange(b.shape[0], device=layout.device) - (torch.cumsum(prefix, 0) - prefix)[b]
    j, off = torch.div(pos, layout.page_size, rounding_mode="floor"), pos % layout.page_size
    dense_row = layout.slot_table.long()[b, j] * layout.page_size + off
    pool_row = layout.req_pages.long()[b, j] * layout.page_size + off
    return torch.stack([b, pos]), dense_row, pool_row


def check_invariants(
    layout: Layout,
    kv_pool: torch.Tensor | None = None,
    dense: torch.Tensor | None = None,
    current_kv: torch.Tensor | None = None,
    token_req: torch.Tensor | None = None,
    out_cache_loc: torch.Tensor | None = None,
) -> None:
    """Check invariants 1 and 2 for a layout and, when given, the dense buffer built from it.

    Args:
        layout: always checked: slot table, inverse, owners; a written slot has one owner (inv. 2).
            A padded layout (:func:`plan_layout_static`) is verified and checked on its used
            slots (host syncs: this is a debugging aid).
        kv_pool: (num_pages, P, *row) and ``dense`` (S, P, *row): every history row of every
            request must equal its pool row (invariant 1). Without ``current_kv`` (right after
            :func:`materialize`) every slot must equal its source page entirely.
        current_kv, token_req, out_cache_loc: (T, *row), (T,), (T,) the current tokens (rows with
            loc -1 skipped): each request's current positions must be covered exactly once and
            hold that request's own rows (invariant 1).

    Raises:
        InvariantError: naming the first offending request, position, page and slot.
    """
    if layout.padded:  # check the used slots; padding slots belong to no request
        layout = layout.exact()
        dense = None if dense is None else dense[: layout.num_slots]
    _check_structure(layout)
    if dense is None:
        return
    page_size = layout.page_size
    dense_rows = byte_rows(dense.reshape(-1, *dense.shape[2:]), 1)
    if kv_pool is not None:
        pool_rows = byte_rows(kv_pool.reshape(-1, *kv_pool.shape[2:]), 1)
        if current_kv is None:
            pages = byte_rows(kv_pool, 1)[layout.slot_page.long()]
            bad = first_true((byte_rows(dense, 1) != pages).any(dim=1))
            if bad is not None:
                s = bad[0]
                raise InvariantError(
                    f"invariant 1: slot {s} differs from its source page "
                    f"{int(layout.slot_page[s])} after materialize"
                )
        else:
            where, drow, prow = _history_rows(layout)
            bad = first_true((dense_rows[drow] != pool_rows[prow]).any(dim=1))
            if bad is not None:
                b, pos = (int(v) for v in where[:, bad[0]])
                raise InvariantError(
                    f"invariant 1: request {b} history position {pos} (page "
                    f"{int(layout.req_pages[b, pos // page_size])}, slot "
                    f"{int(layout.slot_table[b, pos // page_size])}) does not hold its pool row"
                )
    if current_kv is None or token_req is None or out_cache_loc is None:
        return
    _check_current(layout, dense_rows, current_kv, token_req, out_cache_loc)


def _check_current(
    layout: Layout,
    dense_rows: torch.Tensor,
    current_kv: torch.Tensor,
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
) -> None:
    page_size, span = layout.page_size, layout.num_pages * layout.page_size
    valid = torch.nonzero(out_cache_loc >= 0).squeeze(1)
    req, loc = token_req.long()[valid], out_cache_loc.long()[valid]
    want_req, _, want_loc = current_tokens(layout)
    got_key = torch.sort(req * span + loc).values
    want_key = torch.sort(want_req.long() * span + want_loc.long()).values
    if got_key.shape != want_key.shape or not torch.equal(got_key, want_key):
        raise InvariantError(
            f"invariant 1: the current tokens given ({valid.numel()} rows) do not cover each "
            f"request's current positions exactly once ({layout.num_tokens} expected)"
        )
    slot = layout.inverse.long()[req, torch.div(loc, page_size, rounding_mode="floor")]
    row = slot * page_size + loc % page_size
    cur_rows = byte_rows(current_kv, 1)[valid]
    bad = first_true((dense_rows[row] != cur_rows).any(dim=1))
    if bad is not None:
        t = int(valid[bad[0]])
        raise InvariantError(
            f"invariant 1: current token {t} of request {int(token_req[t])} (pool location "
            f"{int(out_cache_loc[t])}, slot {int(slot[bad[0]])}) does not hold its own row"
        )
