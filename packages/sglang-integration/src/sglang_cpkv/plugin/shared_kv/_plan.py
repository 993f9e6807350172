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
per-forward plan gets them from ``cpkv_runtime``'s ``shard_plan`` op, bitwise the same); the
plan only decides *where* each slot lives (``slot_scratch``), so the per-request guarantees of
the layout carry over: a request reads its own private slot for every page it writes, and
shares a slot only for read-only pages. Inside an owner's block, slots keep slot order (first
use in the batch): every rank computes the same order, which is all the all-gather needs.

The plan itself is :func:`sglang_cpkv.plugin.shared_kv.plan_forward`; this module holds its
geometry, its result and the small helpers the pool uses around it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import cpkv_runtime as cr
import torch

from sglang_cpkv.errors import CpkvSGLangError

__all__ = [
    "ScratchCapacityError",
    "ScratchGeometry",
    "ScratchPlacement",
    "current_locs",
    "interleave_kept_rows",
    "owned_local_rows",
    "owned_rows",
    "pack_launcher",
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


@dataclass(eq=False)
class ScratchPlacement:
    """Where each slot of a layout lives in the scratch, and what this rank sends.

    Attributes:
        inverse: (B, num_pages) int32 the layout's per-request inverse over logical pages (slot
            of request b's page, -1 where b does not use it): all a lookup needs.
        page_size: ``P``. num_slots: the slots the batch uses (``S``).
        slot_scratch: (capacity + 1,) int64 scratch page of each slot: the layout's ``S`` used
            slots first, then the trash page for the plan's unused capacity and at the last
            entry (index ``-1``), so ``slot_scratch[inverse]`` maps an absent ``-1`` to trash.
        block: pages each rank contributes to the all-gather (max over ranks of owned slots).
        owned: slots each rank owns in the gather region (``owned[r] <= block``).
        num_fresh: slots in the write region.
        send_pages: (block,) int32 this rank's local pages in gather order, padded with local
            page 0 (reserved on every rank: SGLang's padding page); int32 and contiguous, as
            the page copy kernels' bare launchers take their index.
        layout_of: builds :attr:`layout` when first asked.
    """

    inverse: torch.Tensor
    page_size: int
    num_slots: int
    slot_scratch: torch.Tensor
    block: int
    owned: tuple[int, ...]
    num_fresh: int
    send_pages: torch.Tensor
    layout_of: Callable[[], cr.Layout] = field(repr=False)

    @property
    def num_gathered(self) -> int:
        return sum(self.owned)

    @cached_property
    def layout(self) -> cr.Layout:
        """The batch's :class:`cpkv_runtime.Layout` (``plan_layout``'s, tensor for tensor), built
        on first use: the forward's path needs only :attr:`inverse`, and each tensor the plan
        returns costs the host time the plan is kept small for."""
        return self.layout_of()


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
