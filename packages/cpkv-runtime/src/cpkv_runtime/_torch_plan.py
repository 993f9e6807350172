"""The torch definition of ``plan_slots``: ``plan_layout``'s slot numbering in fixed shapes.

Every tensor's shape depends on ``(B, M, num_pages, max_slots)`` only and nothing reads a value
back to the host, so the same code runs inside a CUDA graph. The Triton and CUDA kernels match it
bitwise (see ``_backend.py`` for the contract, status bits included).

The numbering is ``plan_layout``'s: scan the used pairs ``(b, j)`` row-major; a pair opens a new
slot unless it is read-only, dedup is on and an earlier read-only pair named the same page. The
pairs that open slots are counted in scan order (an inclusive cumulative sum), so slot numbers are
first-use ranks, which is what ``plan_layout`` computes with ``unique`` + ``argsort``.
"""

from __future__ import annotations

import torch

__all__ = [
    "STATUS_CAPACITY",
    "STATUS_DUPLICATE",
    "STATUS_NEGATIVE",
    "STATUS_PAGE",
    "STATUS_TOO_LONG",
    "plan_slots",
]

# Status bits of ``info[1]`` (the contract in _backend.py; the kernels use the same values).
STATUS_NEGATIVE = 1  # a prefix or extend length < 0
STATUS_TOO_LONG = 2  # a request needs more than M pages
STATUS_PAGE = 4  # a used page is -1 or outside the pool
STATUS_DUPLICATE = 8  # a request lists one pool page twice
STATUS_CAPACITY = 16  # the batch needs more than max_slots slots


def _any(mask: torch.Tensor) -> torch.Tensor:
    """0-d int64 1 if any element of ``mask`` is True (0 for an empty mask), on its device."""
    return mask.reshape(-1).any().long() if mask.numel() else mask.new_zeros((), dtype=torch.long)


def plan_slots(
    req_pages: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    page_size: int,
    num_pages: int,
    max_slots: int,
    dedup: bool,
) -> tuple[torch.Tensor, ...]:
    """Slot plan of a batch in fixed shapes; see ``_backend.py`` for the returned tuple.

    Args:
        req_pages: (B, M) int32/int64 pool pages (unvalidated: bad values only set status bits).
        prefix_lens, extend_lens: (B,) int32/int64.
        page_size: P. num_pages: pool size. max_slots: capacity of ``slot_page``/``slot_owner``.
        dedup: read-only pairs naming one page share a slot.

    Returns:
        ``(pages, prefix, extend, seq, pages_used, slot_table, slot_page, slot_owner, inverse,
        used_slots, status, info)``, all int32 (``used_slots`` and ``status`` are views of
        ``info``: this is a plain function, not an op whose outputs must not alias).
    """
    bsz, width = req_pages.shape
    device = req_pages.device
    pairs = bsz * width
    prefix, extend = prefix_lens.long(), extend_lens.long()
    seq = prefix + extend
    pages_used = torch.div(seq + page_size - 1, page_size, rounding_mode="floor")
    j = torch.arange(width, device=device).unsqueeze(0)
    used = j < pages_used.unsqueeze(1)
    page = req_pages.long()
    valid = used & (page >= 0) & (page < num_pages)
    first_page = torch.div(prefix, page_size, rounding_mode="floor").unsqueeze(1)
    written = used & (extend > 0).unsqueeze(1) & (j >= first_page)
    private = written if dedup else used
    flat = torch.arange(pairs, device=device).view(bsz, width)
    page_or_trash = torch.where(valid, page, num_pages)

    # First read-only use of each page, in scan order (pairs = "no read-only use").
    first_use = torch.full((num_pages + 1,), pairs, dtype=torch.long, device=device)
    read_only = valid & ~private
    first_use.scatter_reduce_(
        0, torch.where(read_only, page, num_pages).reshape(-1), flat.reshape(-1), reduce="amin"
    )
    first = first_use[page_or_trash]
    opens = valid & (private | (first == flat))
    count = torch.cumsum(opens.reshape(-1).long(), 0)
    new_slot = (count - 1).view(bsz, width)
    by_pair = torch.where(opens, new_slot, -1).reshape(-1)
    borrowed = by_pair[first.clamp(max=max(pairs - 1, 0))] if pairs else by_pair
    slot = torch.where(opens, new_slot, torch.where(read_only, borrowed.view(bsz, width), -1))
    slot = torch.where(slot < max_slots, slot, -1)

    # Slot sources and owners; entry max_slots takes every pair that opens no slot (discarded).
    target = torch.where(opens & (new_slot < max_slots), new_slot, max_slots).reshape(-1)
    owner_of = torch.arange(bsz, device=device).unsqueeze(1).expand(bsz, width)
    slot_page = torch.full((max_slots + 1,), -1, dtype=torch.long, device=device)
    slot_page.scatter_(0, target, page.reshape(-1))
    slot_owner = torch.full((max_slots + 1,), -1, dtype=torch.long, device=device)
    slot_owner.scatter_(0, target, torch.where(written, owner_of, -1).reshape(-1))

    inverse = torch.full((bsz * num_pages + 1,), -1, dtype=torch.int32, device=device)
    rows = torch.arange(bsz, device=device).unsqueeze(1) * num_pages
    cell = torch.where(valid & (slot >= 0), rows + page, bsz * num_pages).reshape(-1)
    inverse.index_put_((cell,), slot.reshape(-1).int())
    inverse = inverse[:-1].view(bsz, num_pages)

    # Status: the checks of plan_layout, as bits (duplicates: sort each row's valid pages).
    keyed = torch.where(valid, page, num_pages + j)
    ordered = torch.sort(keyed, dim=1).values
    twice = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] < num_pages)
    needed = count[-1] if pairs else count.new_zeros(())
    status = (
        STATUS_NEGATIVE * _any((prefix < 0) | (extend < 0))
        + STATUS_TOO_LONG * _any(pages_used > width)
        + STATUS_PAGE * _any(used & ~valid)
        + STATUS_DUPLICATE * _any(twice)
        + STATUS_CAPACITY * (needed > max_slots).long()
    )
    info = torch.stack([needed, status, extend.sum()]).int()
    return (
        torch.where(used, page, -1).int(),
        prefix.int(),
        extend.int(),
        seq.int(),
        pages_used.int(),
        slot.int(),
        slot_page[:max_slots].int(),
        slot_owner[:max_slots].int(),
        inverse,
        info[0:1],
        info[1:2],
        info,
    )
