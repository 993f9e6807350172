"""The memory :func:`plan_layout` and :func:`plan_layout_static` take, refused before they allocate.

A layout's size follows from shapes alone, never from the values: ``inverse`` is
``(B, num_pages)`` int32, so 8 requests over a pool of ``10**10`` pages (a byte count passed as a
page count, say) would ask for 298 GiB before a page is read. The estimate below is worked out
from ``req_pages.shape``, ``num_pages`` and ``max_slots`` (no tensor is read, so the check adds
no host sync), and a layout over the budget raises :class:`LayoutError` naming the sizes, the
budget and its source, before any tensor of the layout's size exists.

Estimate (counted from the torch path, the most memory any backend uses; each term an upper bound
on what is alive at once, ``B`` requests, ``M = req_pages.shape[1]``):

- ``INVERSE_BYTES`` = 4 per cell of ``inverse``, ``B * num_pages`` of them (int32; measured
  exact, the trash cell aside);
- ``PAIR_BYTES`` = 224 per ``(request, page)`` pair, ``B * M`` of them: the ``(B, M)`` tables,
  masks, sort keys and their int64 temporaries. Measured on CPU (peak RSS of a 2M-pair layout):
  120-141 bytes a pair; 224 leaves room for allocator slack;
- ``SLOT_BYTES`` = 32 per slot: :func:`plan_layout` makes at most ``B * M`` slots,
  :func:`plan_layout_static` ``max_slots`` (its source and owner lists, int64 then int32: 24);
- ``POOL_PAGE_BYTES`` = 8 per pool page, :func:`plan_layout_static` only (the first read-only use
  of each page, int64);
- ``REQUEST_BYTES`` = 128 per request and ``COLUMN_BYTES`` = 64 per column of ``req_pages``: the
  ``(B,)`` lengths and page counts and the ``(M,)`` column index with their int64 temporaries
  (they count where ``B * M`` does not: 10**9 requests of no page, or none of 10**12 columns);
- ``FIXED_BYTES`` = 1 MiB: small tensors, allocator rounding and page granularity.

The inverse and pool terms are exact: a plan whose size is all inverse rises by the estimate less
about the fixed term.

Budget, first set wins (see ``_budget``): the ``max_bytes=`` argument; ``CPKV_LAYOUT_MAX_BYTES``
(bytes); else what the device can host now (CUDA free + cached memory, CPU ``MemAvailable``).
Two cases skip that last, device-given budget (an explicit one always applies): a layout of at
most ``SMALL_BYTES`` (64 MiB; a per-forward plan of 8 requests of 66K tokens over a pool of
2**20 pages is 43 MiB), so the per-forward planner asks the driver nothing, and a device
too full for such a layout fails its allocation with PyTorch's own error anyway; and a CUDA
stream being captured into a graph, which must not query the device (the eager run before capture
already checked the same shapes).
"""

from __future__ import annotations

import torch

from ._budget import count, device_budget, explicit_budget, gib
from .errors import LayoutError

__all__ = ["ENV", "check_layout_budget", "layout_bytes"]

ENV = "CPKV_LAYOUT_MAX_BYTES"
INVERSE_BYTES = 4
PAIR_BYTES = 224
SLOT_BYTES = 32
POOL_PAGE_BYTES = 8
REQUEST_BYTES = 128
COLUMN_BYTES = 64
FIXED_BYTES = 2**20
SMALL_BYTES = 64 * 2**20


def layout_bytes(batch: int, max_pages: int, num_pages: int, slots: int, static: bool) -> int:
    """Upper bound on the bytes a layout of these sizes allocates (see the module docstring)."""
    pool = POOL_PAGE_BYTES * num_pages if static else 0
    return (
        INVERSE_BYTES * batch * num_pages
        + PAIR_BYTES * batch * max_pages
        + SLOT_BYTES * slots
        + pool
        + REQUEST_BYTES * batch
        + COLUMN_BYTES * max_pages
        + FIXED_BYTES
    )


def check_layout_budget(
    op: str,
    req_pages: torch.Tensor,
    num_pages: int,
    max_slots: int | None,
    max_bytes: int | None,
) -> None:
    """Raise :class:`LayoutError` if ``op`` would allocate more than the budget.

    Args:
        op: ``"plan_layout"`` or ``"plan_layout_static"``.
        req_pages: (B, M); only its shape and device are read.
        num_pages: pool size.
        max_slots: slot capacity of ``plan_layout_static``; None for ``plan_layout`` (at most
            ``B * M`` slots).
        max_bytes: the caller's budget, or None.
    """
    batch, max_pages = req_pages.shape
    static = max_slots is not None
    slots = max_slots if static else batch * max_pages
    need = layout_bytes(batch, max_pages, num_pages, slots, static)
    budget, source = explicit_budget(max_bytes, ENV)
    if budget is None:
        if need <= SMALL_BYTES or _capturing(req_pages.device):
            return
        budget, source = device_budget(req_pages.device)
    if budget is None or need <= budget:
        return
    terms = [
        f"inverse B * num_pages = {batch:,} * {num_pages:,} = {batch * num_pages:,} int32 cells",
        f"{count(batch * max_pages, '(request, page) pair')}",
        f"{count(slots, 'slot')}",
    ]
    if static:
        terms.append(f"{count(num_pages, 'pool page')}")
    raise LayoutError(
        f"{op} of {count(batch, 'request')} x {count(max_pages, 'page')} over a pool of "
        f"{count(num_pages, 'page')} would allocate {gib(need)} ({', '.join(terms)}), over the "
        f"budget of {gib(budget)} ({source}); fix: pass the pool's real num_pages"
        + (" and a max_slots the batch needs" if static else "")
        + f", or plan fewer requests at once, or raise the budget with max_bytes= or {ENV}"
    )


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()
