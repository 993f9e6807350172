"""The per-forward scratch plan: a ``cpkv_runtime`` layout of the batch, placed where the
all-gather delivers it.

SGLang's sharded pool (``mem_cache/page_interleave_pool.py``) keeps logical page ``l`` on rank
``l % N`` as local page ``l // N``. A forward assembles, per layer, a scratch buffer of pages:

- **gather region** ``[0, N * block)``: every slot that holds history (a read-only prefix page,
  shared by the requests that read it, or the history part of a page a request writes). Rank
  ``r`` packs the slots it owns into ``[r * block, (r + 1) * block)``, padded with its reserved
  local page 0, and one in-place all-gather assembles the region on every rank;
- **write region** from ``write_base``: private slots of pages that hold no history (fresh
  current pages), in slot order;
- **trash page** ``trash_page``: where an absent lookup points (never read as data).

The slots are those of :func:`cpkv_runtime.plan_layout` (keyed by ``(request, page)``; the
per-forward plan gets them from :func:`cpkv_runtime.plan_layout_static`, bitwise the same); this
module only decides *where* each slot lives (``slot_scratch``), so the per-request guarantees of
the layout carry over: a request reads its own private slot for every page it writes, and
shares a slot only for read-only pages. Inside an owner's block, slots are ordered by local page
(then slot), as SGLang orders its prefix pages, so a single request's plan places its prefix
exactly where SGLang's does.

One host read per plan, in :func:`place_slots` between its two device halves
(:func:`order_slots`, :func:`assign_slots`): one small tensor with the static layout's status,
its slot count and the per-owner slot counts (``block`` sizes the all-gather, the counts size
the regions and the admission check). Everything the per-layer path needs is a device tensor
afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import cpkv_runtime as cr
import torch

from sglang_cpkv.errors import CpkvSGLangError

__all__ = [
    "ScratchCapacityError",
    "ScratchGeometry",
    "ScratchPlacement",
    "SlotOrder",
    "assign_slots",
    "current_locs",
    "interleave_kept_rows",
    "order_slots",
    "owned_local_rows",
    "place_slots",
    "request_pages",
    "to_scratch",
]


class ScratchCapacityError(CpkvSGLangError, RuntimeError):
    """A batch needs more scratch pages than the pool allocated (admission should have deferred
    it); raised once per forward, before any layer runs."""


@dataclass(frozen=True)
class ScratchGeometry:
    """Where the regions of one scratch slot start, in pages of ``page_size`` tokens.

    Attributes:
        page_size: ``P``.
        shard_size: ``N``, ranks of the shard (attention-CP) group.
        shard_rank: this rank.
        gather_pages: capacity of the gather region (SGLang's ``max_prefix_tokens / P``).
        write_pages: capacity of the write region (SGLang's ``chunk_tokens / P``).
    """

    page_size: int
    shard_size: int
    shard_rank: int
    gather_pages: int
    write_pages: int

    @property
    def write_base(self) -> int:
        return self.gather_pages

    @property
    def trash_page(self) -> int:
        return self.gather_pages + self.write_pages


@dataclass(frozen=True, eq=False)
class ScratchPlacement:
    """Where each slot of a layout lives in the scratch, and what this rank sends.

    Attributes:
        layout: the batch's :class:`cpkv_runtime.Layout` over logical pages.
        slot_scratch: (S + 1,) int64 scratch page of each slot; entry ``S`` (= index ``-1``) is
            the trash page, so ``slot_scratch[inverse]`` maps an absent ``-1`` to trash.
        block: pages each rank contributes to the all-gather (max over ranks of owned slots).
        owned: slots each rank owns in the gather region (``owned[r] <= block``).
        num_fresh: slots in the write region.
        send_pages: (block,) int64 this rank's local pages in gather order, padded with local
            page 0 (reserved on every rank: SGLang's padding page).
    """

    layout: cr.Layout
    slot_scratch: torch.Tensor
    block: int
    owned: tuple[int, ...]
    num_fresh: int
    send_pages: torch.Tensor

    @property
    def num_gathered(self) -> int:
        return sum(self.owned)


def request_pages(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: Sequence[int],
    page_size: int,
) -> torch.Tensor:
    """Each request's logical pages, read from SGLang's ``req_to_token`` (one entry per page).

    Position ``i`` of a request lives at ``req_to_token[r, i]``, on page ``loc // P`` at offset
    ``i % P`` (SGLang's paged allocators keep a position-page on one pool page), so the first
    position of each position-page names the page.

    Args:
        req_to_token: (max_reqs, max_context) int token locations.
        req_pool_indices: (B,) the batch's rows of ``req_to_token``.
        seq_lens: (B,) host lengths.
        page_size: ``P``.

    Returns:
        (B, max_pages) int32 pages, -1 past ``ceil(seq_lens[b] / P)``.
    """
    device = req_to_token.device
    used = [-(-int(s) // page_size) for s in seq_lens]
    max_pages = max(used, default=0)
    cols = torch.arange(0, max_pages * page_size, page_size, device=device)
    first = req_to_token[req_pool_indices.long().unsqueeze(1), cols.unsqueeze(0)]
    pages = torch.div(first.long(), page_size, rounding_mode="floor")
    j = torch.arange(max_pages, device=device).unsqueeze(0)
    n_used = torch.tensor(used, dtype=torch.long).to(device, non_blocking=True).unsqueeze(1)
    return torch.where(j < n_used, pages, -1).to(torch.int32)


def current_locs(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    prefix_lens: Sequence[int],
    seq_lens: Sequence[int],
) -> torch.Tensor:
    """The batch's current-token locations, request-major (what SGLang's ``out_cache_loc`` holds
    once the allocator has written ``req_to_token``).

    One gather at (request, position) indices computed on the device from the host lengths:
    indexing ``req_to_token`` with a 0-d device tensor per request would read each index back.

    Returns:
        (T,) of ``req_to_token``'s dtype, ``T = sum(seq_lens - prefix_lens)``.
    """
    device = req_to_token.device
    prefix = [int(p) for p in prefix_lens]
    extend = [int(s) - p for s, p in zip(seq_lens, prefix, strict=True)]
    num_tokens = sum(extend)
    lens = torch.tensor([prefix, extend], dtype=torch.long).reshape(2, len(prefix))
    prefix_t, extend_t = lens.to(device, non_blocking=True)
    req = torch.repeat_interleave(
        torch.arange(len(prefix), device=device), extend_t, output_size=num_tokens
    )
    first = torch.cumsum(extend_t, 0) - extend_t  # each request's first flattened token
    pos = torch.arange(num_tokens, device=device) - first[req] + prefix_t[req]
    return req_to_token[req_pool_indices.long()[req], pos]


@dataclass(frozen=True, eq=False)
class SlotOrder:
    """The device half of :func:`place_slots`: every slot's owner and gather order, before the
    one host read that sizes the regions.

    Attributes:
        layout: the layout being placed (padded from :func:`cpkv_runtime.plan_layout_static`,
            or exact from :func:`cpkv_runtime.plan_layout`); ``S`` = ``layout.num_slots``.
        order: (S,) int64 slot ids: gathered slots by (owner rank, local page, slot), then the
            others by slot (used fresh slots before the padding slots of a padded layout).
        owner: (S,) int64 rank that owns each slot's page (``page % N``).
        local: (S,) int64 local page of each slot's page on its owner (``page // N``).
        host_numbers: (2 + N,) int64 what the host needs, read in one transfer: the layout's
            status (0 = valid input), the slots it uses, and each rank's gathered slots.
    """

    layout: cr.Layout
    order: torch.Tensor
    owner: torch.Tensor
    local: torch.Tensor
    host_numbers: torch.Tensor


def order_slots(layout: cr.Layout, geo: ScratchGeometry) -> SlotOrder:
    """Sort the slots of ``layout`` for the gather (device work only: nothing is read back).

    A slot is *gathered* when some request reads a history row through it (a read-only prefix
    page, or the history part of a page a request writes); the others are fresh.
    """
    p, n, device = geo.page_size, geo.shard_size, layout.device
    num_slots = layout.num_slots
    j = torch.arange(layout.max_pages, device=device).unsqueeze(0)
    used = layout.slot_table >= 0
    history = used & (j * p < layout.prefix_lens.long().unsqueeze(1))
    slot = layout.slot_table.long().clamp(min=0)
    hits = torch.zeros(num_slots + 1, dtype=torch.long, device=device)
    hits.index_add_(0, torch.where(used, slot, num_slots).reshape(-1), history.reshape(-1).long())
    gathered = hits[:num_slots] > 0
    page = layout.slot_page.long()  # -1 on a padded layout's padding slots (never gathered)
    owner = page % n
    local = torch.div(page, n, rounding_mode="floor")
    ids = torch.arange(num_slots, device=device)
    span = (int(layout.num_pages) // n + 1) * max(num_slots, 1)
    key = torch.where(gathered, (owner * span) + local * num_slots + ids, n * span + ids)
    order = torch.argsort(key)
    # (bincount and boolean indexing would each sync: they size their output on the host)
    counts = torch.zeros(n, dtype=torch.long, device=device).index_add_(0, owner, gathered.long())
    if layout.padded:
        head = torch.cat([layout.status, layout.used_slots]).long()
    else:
        head = torch.tensor([0, num_slots], dtype=torch.long).to(device, non_blocking=True)
    return SlotOrder(layout, order, owner, local, torch.cat([head, counts]))


def assign_slots(
    slots: SlotOrder, host_numbers: Sequence[int], geo: ScratchGeometry
) -> ScratchPlacement:
    """Give every slot a scratch page from :func:`order_slots` and its host numbers (device
    work only; ``host_numbers`` is ``slots.host_numbers`` read back).

    Raises:
        cpkv_runtime.LayoutError: the layout's input was invalid (its status is nonzero).
        ScratchCapacityError: the gather or write region is too small for this batch.
    """
    n, device = geo.shard_size, slots.layout.device
    status, num_used, *owned_list = (int(v) for v in host_numbers)
    if status:  # bad input: plan_layout's own message (its checks rerun, off the hot path)
        slots.layout.verify()
        raise AssertionError(f"layout status {status}, yet Layout.verify() passed")
    owned = tuple(owned_list)
    if len(owned) != n:
        raise ValueError(f"host_numbers holds {len(owned)} rank counts for {n} ranks")
    layout = slots.layout
    if layout.padded:  # plan_layout's exact layout: the padding slots cut off
        layout = replace(
            layout,
            slot_page=layout.slot_page[:num_used],
            slot_owner=layout.slot_owner[:num_used],
            used_slots=None,
            status=None,
        )
    block = max(owned, default=0)
    num_gathered = sum(owned)
    num_fresh = num_used - num_gathered
    if n * block > geo.gather_pages or num_fresh > geo.write_pages:
        raise ScratchCapacityError(
            f"this batch needs {n} x {block} gather pages (ranks own {list(owned)} of its "
            f"{num_gathered} history slots) and {num_fresh} write pages, but the scratch holds "
            f"{geo.gather_pages} and {geo.write_pages}; admission should have deferred it. Fix: "
            f"raise the scratch (longer --context-length budget or --chunked-prefill-size) or "
            f"send fewer long prefixes per batch"
        )
    counts = slots.host_numbers[2:]
    start_of = torch.cumsum(counts, 0) - counts
    owner, order = slots.owner, slots.order
    sorted_gathered = order[:num_gathered]
    within = torch.arange(num_gathered, device=device) - start_of[owner[sorted_gathered]]
    slot_scratch = torch.empty(num_used + 1, dtype=torch.long, device=device)
    slot_scratch[sorted_gathered] = owner[sorted_gathered] * block + within
    fresh = order[num_gathered:num_used]
    slot_scratch[fresh] = geo.write_base + torch.arange(num_fresh, device=device)
    slot_scratch[num_used] = geo.trash_page
    first = sum(owned[: geo.shard_rank])
    mine = sorted_gathered[first : first + owned[geo.shard_rank]]
    send_pages = torch.zeros(block, dtype=torch.long, device=device)
    send_pages[: mine.shape[0]] = slots.local[mine]
    return ScratchPlacement(layout, slot_scratch, block, owned, num_fresh, send_pages)


def place_slots(
    layout: cr.Layout, prefix_lens: Sequence[int], geo: ScratchGeometry
) -> ScratchPlacement:
    """Give every slot of ``layout`` a scratch page (see the module docstring).

    :func:`order_slots`, one host read of its ``host_numbers`` (the plan's one sync), then
    :func:`assign_slots`.

    Args:
        layout: from :func:`cpkv_runtime.plan_layout_static` (or :func:`cpkv_runtime.plan_layout`)
            over logical pages; the placement keeps it without its padding slots.
        prefix_lens: (B,) host history lengths (the layout's ``prefix_lens``). The placement
            reads the layout's device copy; the host list only has to name every request.
        geo: the scratch regions.

    Raises:
        ValueError: ``prefix_lens`` does not hold one length per request of ``layout``.
        cpkv_runtime.LayoutError: a padded layout's input was invalid.
        ScratchCapacityError: the gather or write region is too small for this batch.
    """
    if len(prefix_lens) != layout.batch_size:
        raise ValueError(
            f"prefix_lens has {len(prefix_lens)} entries but the layout has "
            f"{layout.batch_size} requests; fix: pass the lengths the layout was planned with"
        )
    slots = order_slots(layout, geo)
    return assign_slots(slots, slots.host_numbers.tolist(), geo)  # the plan's one host read


def to_scratch(
    dense_locs: torch.Tensor, slot_scratch: torch.Tensor, page_size: int
) -> torch.Tensor:
    """Dense-buffer locations (``cpkv_runtime.remap_locs`` output) to scratch rows.

    ``slot_scratch[loc // P] * P + loc % P``; an absent ``-1`` lands on the trash page.

    Returns:
        int64 of ``dense_locs``'s shape.
    """
    loc = dense_locs.long()
    page = torch.div(loc, page_size, rounding_mode="floor")
    return slot_scratch[page] * page_size + loc % page_size


def owned_local_rows(
    loc: torch.Tensor, page_size: int, shard_size: int, shard_rank: int
) -> torch.Tensor:
    """Local pool row of every logical location this rank owns; the others go to local page 0.

    SGLang's placement: logical ``loc`` is owned by rank ``(loc // P) % N`` at local row
    ``(loc // (N * P)) * P + loc % P``. Writing every row (non-owned ones onto the reserved page 0,
    SGLang's padding page) replaces the owner filter's ``nonzero`` (a host sync) with a
    fixed-shape write.

    Returns:
        int64 of ``loc``'s shape.
    """
    loc = loc.long()
    p, n = page_size, shard_size
    owner = torch.div(loc, p, rounding_mode="floor") % n
    local = torch.div(loc, n * p, rounding_mode="floor") * p + loc % p
    return torch.where(owner == shard_rank, local, loc % p)


def interleave_kept_rows(extend_lens: Sequence[int], cp_size: int, cp_rank: int) -> list[int]:
    """The requests an interleave-CP rank keeps rows for (SGLang's ``bs_idx``).

    Flattened token ``i`` goes to rank ``i % cp_size``; a request stays on a rank that holds at
    least one of its tokens. Held equal to ``InterleaveCPStrategy.shard_per_request`` by
    ``tests/test_upstream_shared_kv_rows.py``.
    """
    kept, start = [], 0
    for req, n in enumerate(int(x) for x in extend_lens):
        first = start + (cp_rank - start) % cp_size
        if first < start + n:
            kept.append(req)
        start += n
    return kept
