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
its slot count and where each owner's run of gathered slots ends (``block`` sizes the
all-gather, the counts size the regions and the admission check). Everything the per-layer path
needs is a device tensor afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    "owned_rows",
    "pack_launcher",
    "place_slots",
    "request_pages",
    "to_scratch",
    "upload_ints",
]


class ScratchCapacityError(CpkvSGLangError, RuntimeError):
    """A batch needs more scratch pages than the pool allocated (admission should have deferred
    it); raised once per forward, before any layer runs."""


def upload_ints(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """Host ints -> a (len,) int64 tensor on ``device``, in one non-blocking copy.

    On CUDA the host side is pinned (PyTorch's caching host allocator, which keeps the block
    until the copy has run): a copy from pageable memory stalls the host while the driver
    stages it, and ``set_sync_debug_mode`` does not see that stall.
    """
    host = torch.tensor(values, dtype=torch.long, pin_memory=device.type == "cuda")
    return host.to(device, non_blocking=True)


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
        send_pages: (block,) int32 this rank's local pages in gather order, padded with local
            page 0 (reserved on every rank: SGLang's padding page); int32 and contiguous, as
            the page copy kernels' bare launchers take their index.
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


def pack_launcher(device: torch.device, backend: str | None = None) -> Callable[..., object]:
    """The page copy ``(pool_pages, pages, out) -> None`` the per-layer packs run:
    ``out[i] = pool_pages[pages[i]]``.

    The chosen backend's bare ``materialize`` launcher (``Backend.raw_ops``: no Python checks,
    no conversion; CUDA keeps its C++ shape checks), else its checked op (the torch backend has
    no launcher). Its inputs are checked once per forward instead: ``pages`` is the plan's
    ``send_pages`` (int32, contiguous, local pages in range by construction) and ``out`` this
    rank's block of the scratch, page-shaped like the pool.
    """
    chosen = cr.resolve_backend("materialize", device, backend)
    return chosen.raw_ops.get("materialize", chosen.ops["materialize"])


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
    n_used = upload_ints(used, device).unsqueeze(1)
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
    prefix_t, extend_t = upload_ints([*prefix, *extend], device).view(2, len(prefix))
    req = torch.repeat_interleave(extend_t, output_size=num_tokens)  # request of each token
    first = torch.cumsum(extend_t, 0) - extend_t  # each request's first flattened token
    pos = torch.arange(num_tokens, device=device) - first[req] + prefix_t[req]
    return req_to_token[req_pool_indices.long()[req], pos]


@dataclass(frozen=True, eq=False)
class SlotOrder:
    """The device half of :func:`place_slots`: every slot's gather order, before the one host
    read that sizes the regions.

    Attributes:
        layout: the layout being placed (padded from :func:`cpkv_runtime.plan_layout_static`,
            or exact from :func:`cpkv_runtime.plan_layout`); ``S`` = ``layout.num_slots``.
        order: (S,) int64 slot ids: gathered slots by (owner rank, local page, slot), then the
            others by slot (used fresh slots before the padding slots of a padded layout).
        host_numbers: (2 + N,) int64 what the host needs, read in one transfer: the layout's
            status (0 = valid input), the slots it uses, and for each rank ``r`` the gathered
            slots of ranks ``0..r`` (the end of rank ``r``'s run in ``order``).
    """

    layout: cr.Layout
    order: torch.Tensor
    host_numbers: torch.Tensor


def order_slots(
    layout: cr.Layout,
    geo: ScratchGeometry,
    *,
    history_pages: torch.Tensor | None = None,
    rank_ends: torch.Tensor | None = None,
) -> SlotOrder:
    """Sort the slots of ``layout`` for the gather (device work only: nothing is read back).

    A slot is *gathered* when some request reads a history row through it: a page at position
    ``j < ceil(prefix / P)`` of a request (a read-only prefix page, or the history part of a
    page the request writes); the others are fresh. Logical page ``l`` of a gathered slot is
    owned by rank ``l % N``, as local page ``l // N``; its sort key ``l + (l % N) * num_pages``
    orders by (owner, local page), and a stable sort keeps slot order among equal keys.

    Args:
        layout: the batch's layout.
        geo: the scratch regions.
        history_pages: (B,) int64 ``ceil(prefix_lens / P)``; the forward plan uploads it with
            the host lengths (default: computed from the layout's lengths on the device).
        rank_ends: (N,) int64 ``(r + 1) * num_pages``, likewise (default: uploaded here).
    """
    n, device = geo.shard_size, layout.device
    num_slots, num_pages = layout.num_slots, int(layout.num_pages)
    if history_pages is None:
        p = geo.page_size
        history_pages = torch.div(layout.prefix_lens.long() + (p - 1), p, rounding_mode="floor")
    if rank_ends is None:
        rank_ends = upload_ints([(r + 1) * num_pages for r in range(n)], device)
    j = torch.arange(layout.max_pages, device=device)
    # Every position below ceil(prefix / P) holds a page (an invalid layout's -1 lands on the
    # spare entry, as do all other positions: index_fill_ wraps -1 to the last entry).
    history = layout.slot_table.masked_fill(j >= history_pages.view(-1, 1), -1)
    fresh = torch.ones(num_slots + 1, dtype=torch.bool, device=device)
    fresh.index_fill_(0, history.view(-1).long(), False)
    page = layout.slot_page.long()  # -1 on a padded layout's padding slots (never gathered)
    key = torch.add(page, page % n, alpha=num_pages).masked_fill_(fresh[:num_slots], n * num_pages)
    key, order = torch.sort(key, stable=True)
    # (bincount and boolean indexing would each sync: they size their output on the host)
    ends = torch.searchsorted(key, rank_ends)
    if layout.padded:
        host_numbers = torch.cat([layout.status, layout.used_slots, ends])
    else:
        host_numbers = torch.cat([upload_ints([0, num_slots], device), ends])
    return SlotOrder(layout, order, host_numbers)


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
    status, num_used, *ends = (int(v) for v in host_numbers)
    if status:  # bad input: plan_layout's own message (its checks rerun, off the hot path)
        slots.layout.verify()
        raise AssertionError(f"layout status {status}, yet Layout.verify() passed")
    if len(ends) != n:
        raise ValueError(f"host_numbers holds {len(ends)} rank counts for {n} ranks")
    starts = [0, *ends[:-1]]
    owned = tuple(e - s for s, e in zip(starts, ends, strict=True))
    layout = slots.layout
    full_slot_page = layout.slot_page
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
    # Sorted position i of rank r's run goes to page r * block + (i - starts[r]); of the fresh
    # run to write_base + (i - num_gathered): i plus one offset per run, built on the host.
    offsets = [r * block - starts[r] for r in range(n)] + [geo.write_base - num_gathered]
    runs = upload_ints([*offsets, *owned, num_fresh], device)
    where = torch.arange(num_used, device=device) + torch.repeat_interleave(
        runs[: n + 1], runs[n + 1 :], output_size=num_used
    )
    slot_scratch = torch.full((num_used + 1,), geo.trash_page, dtype=torch.long, device=device)
    slot_scratch.index_copy_(0, slots.order[:num_used], where)
    mine = slots.order[starts[geo.shard_rank] : ends[geo.shard_rank]]
    local = torch.div(full_slot_page.index_select(0, mine), n, rounding_mode="floor")
    send_pages = torch.nn.functional.pad(local, (0, block - local.shape[0]))
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
    return owned_rows(torch.div(loc, page_size, rounding_mode="floor"), loc % page_size,
                      page_size, shard_size, shard_rank)  # fmt: skip


def owned_rows(
    page: torch.Tensor, offset: torch.Tensor, page_size: int, shard_size: int, shard_rank: int
) -> torch.Tensor:
    """:func:`owned_local_rows` from each location's logical page and offset in it (int64)."""
    local = torch.add(offset, torch.div(page, shard_size, rounding_mode="floor"), alpha=page_size)
    return torch.where(page % shard_size == shard_rank, local, offset)


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
