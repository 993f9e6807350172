"""One forward's scratch plan, and every lookup the per-layer path makes through it.

:func:`plan_forward` runs once per forward (attention-metadata time): ``cpkv_runtime``'s
``shard_plan`` op reads the batch's pages from ``req_to_token``, plans their static layout,
orders the slots for the gather, sizes the all-gather's block, gives every slot its scratch page
and precomputes this rank's send list, the scratch row of every current token and the local pool
row it persists to, all on the device (one dispatcher trip, four launches on a GPU); then one
``.tolist()`` of its (3 + N,) host numbers (the layout's status and slot count, where each
rank's run of gathered slots ends, the block) carries the input and capacity checks and sizes
the all-gather on the host. The lookups below are what SGLang's pool methods call per layer;
they use only tensors of the plan (no host sync), and each distinct table is translated once
per forward.

The per-forward lookup cache is keyed by a table's address, shape, stride, dtype and version
counter, and each entry holds the table it was computed from: while an entry lives no other
tensor can be allocated at that address, so an address names one storage, and an in-place
write to it (which bumps the version counter its views share) misses. Keyed by address alone,
a table freed mid-forward and a different one allocated in its place would read the first
one's rows. Tensors made under ``torch.inference_mode`` (SGLang's forward with
``SGLANG_ENABLE_TORCH_INFERENCE_MODE=1``) keep no version counter; for them an in-place
rewrite mid-forward is not seen. SGLang builds its tables in ``init_forward_metadata``, before
the layers read them, and does not rewrite them during the forward.

Which request a row belongs to is given by the forward batch, never guessed from a shape:

- a 1-D location tensor is the batch's ``out_cache_loc`` (its tokens' requests are
  ``token_req``); at batch size 1 any 1-D tensor belongs to request 0;
- a 2-D table (the attention page table, the indexer's page table) has one row per request of
  :attr:`ForwardScratch.table_req`: the ``bs_idx`` requests this rank keeps rows for when the
  batch is split by interleave CP (``kept_rows``), else all ``B``. SGLang's DSA backend builds
  both tables from ``page_table[bs_idx]`` (``init_forward_metadata``); a table with any other
  row count is refused (:class:`TranslationError`), not matched by its length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import cpkv_runtime as cr
import torch

from sglang_cpkv.plugin.shared_kv._plan import (
    ScratchCapacityError,
    ScratchGeometry,
    ScratchPlacement,
    owned_local_rows,
    to_scratch,
)

__all__ = [
    "ForwardDraft",
    "ForwardScratch",
    "ShardOps",
    "TranslationError",
    "draft_forward",
    "finish_forward",
    "plan_forward",
    "shard_ops",
]


class TranslationError(ValueError):
    """A location tensor cannot be given a request (so it cannot be translated per request)."""


@dataclass(eq=False)
class ForwardScratch:
    """The plan of one forward (all tensors on the pool's device).

    Attributes:
        placement: the layout and where each slot lives (:class:`ScratchPlacement`).
        out_cache_loc: (T,) the batch's current-token locations, as SGLang passes them.
        token_req: (T,) int64 request of each current token.
        cur_rows: (T,) int64 scratch row of each current token (its request's private slot).
        local_rows: (T,) int64 local pool row each token persists to (page 0 when not owned).
        table_req: (R,) int64 request of each row of the forward's 2-D tables (the kept rows
            under interleave CP, else ``0 .. B - 1``).
        remap: ``cpkv_runtime``'s ``remap_locs`` op (pool locations -> dense locations through
            the per-request inverse), resolved with the plan's ops.
        stage_after_gather: some page holds history *and* current rows of one request (a prefix
            that ends mid-page), so its private slot is both gathered and staged: the stores of
            a layer must wait for that layer's gather (otherwise they are disjoint from it).
    """

    placement: ScratchPlacement
    out_cache_loc: torch.Tensor
    token_req: torch.Tensor
    cur_rows: torch.Tensor
    local_rows: torch.Tensor
    table_req: torch.Tensor
    remap: Callable[..., torch.Tensor]
    stage_after_gather: bool = False
    _cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @property
    def page_size(self) -> int:
        return self.placement.page_size

    @property
    def batch_size(self) -> int:
        return self.placement.inverse.shape[0]

    def _cached(self, kind: str, src: torch.Tensor) -> tuple[tuple, torch.Tensor | None]:
        """The cache key of ``src`` and its lookup if this forward made it already."""
        version = None if src.is_inference() else src._version
        key = (kind, src.data_ptr(), tuple(src.shape), src.stride(), src.dtype, version)
        hit = self._cache.get(key)
        return key, (hit[1] if hit is not None else None)

    def _remember(self, key: tuple, src: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        self._cache[key] = (src, out)  # src stays alive: its address cannot be reused
        return out

    def _is_out_cache_loc(self, loc: torch.Tensor) -> bool:
        ref = self.out_cache_loc
        return (
            loc.dim() == 1
            and loc.numel() == ref.numel()
            and (loc.numel() == 0 or loc.data_ptr() == ref.data_ptr())
            and loc.stride() == ref.stride()
        )

    def write_rows(self, loc: torch.Tensor) -> torch.Tensor:
        """Scratch rows for current tokens at ``loc`` (the batch's ``out_cache_loc``)."""
        if self._is_out_cache_loc(loc):
            return self.cur_rows
        return self.translate(loc)

    def persist_rows(self, loc: torch.Tensor, geo: ScratchGeometry) -> torch.Tensor:
        """Local pool rows for ``loc`` (precomputed for ``out_cache_loc``)."""
        if self._is_out_cache_loc(loc):
            return self.local_rows
        return owned_local_rows(loc, geo.page_size, geo.shard_size, geo.shard_rank)

    def _table_requests(self, n: int, what: str) -> torch.Tensor:
        """The request of each of a table's ``n`` rows (:attr:`table_req`)."""
        if n != self.table_req.shape[0]:
            raise TranslationError(
                f"{what} has {n} rows, but this forward's tables have one row per request it "
                f"keeps ({self.table_req.shape[0]} of {self.batch_size}); a per-request scratch "
                f"lookup needs the request of every row. Fix: translate page tables built "
                f"from this batch's kept requests (page_table[bs_idx])"
            )
        return self.table_req

    def translate(self, loc: torch.Tensor) -> torch.Tensor:
        """Pool (logical) locations -> scratch rows, each by its own request.

        Args:
            loc: (T,) the batch's ``out_cache_loc`` (or any (N,) at batch size 1), or (R, W) a
                page table with one row per request (token locations).

        Returns:
            int64 of ``loc``'s shape; locations the request does not use land on the trash page.
        """
        if loc.dim() == 1 and self._is_out_cache_loc(loc):
            return self.cur_rows
        key, hit = self._cached("loc", loc)
        if hit is not None:
            return hit
        if loc.dim() == 2:
            req = self._table_requests(loc.shape[0], "the page table")
        elif loc.dim() == 1 and self.batch_size == 1:
            req = torch.zeros(loc.shape[0], dtype=torch.long, device=loc.device)
        else:
            raise TranslationError(
                f"a {loc.dim()}-D location tensor of shape {tuple(loc.shape)} is not this "
                f"forward's out_cache_loc, and at batch size {self.batch_size} its locations "
                f"cannot be given a request (a page two requests list maps to two slots). Fix: "
                f"pass the batch's out_cache_loc, or a page table with one row per request"
            )
        dense = self.remap(loc, req, self.placement.inverse, self.page_size)
        rows = to_scratch(dense, self.placement.slot_scratch, self.page_size)
        return self._remember(key, loc, rows)

    def scratch_pages(self, pages: torch.Tensor) -> torch.Tensor:
        """Logical page ids (R, W), one row per request -> scratch pages, each by its request."""
        key, hit = self._cached("page", pages)
        if hit is not None:
            return hit
        if pages.dim() != 2:
            raise TranslationError(
                f"indexer page table must be 2-D (one row per request), got {tuple(pages.shape)}"
            )
        req = self._table_requests(pages.shape[0], "the indexer page table")
        inverse = self.placement.inverse
        slot = inverse[req.unsqueeze(1), pages.long().clamp(0, inverse.shape[1] - 1)]
        out = self.placement.slot_scratch[slot.long()]
        return self._remember(key, pages, out)


@dataclass(frozen=True)
class ShardOps:
    """The ops the plan and its lookups call, resolved once (CUDA > Triton > torch, as
    ``CPKV_BACKEND`` allows): ``shard_plan``'s bare launcher where the backend has one (CUDA),
    else its op; ``remap_locs`` (page tables to dense locations, once per table and forward)."""

    plan: Callable[..., Any]
    remap: Callable[..., torch.Tensor]


def shard_ops(device: torch.device, backend: str | None = None) -> ShardOps:
    """:class:`ShardOps` for ``device`` (the pool resolves them once, at its first forward);
    ``remap`` is the checked ``remap_locs`` op (it allocates its output)."""
    chosen = cr.resolve_backend("shard_plan", device, backend)
    plan = chosen.raw_ops.get("shard_plan", chosen.ops["shard_plan"])
    return ShardOps(plan, cr.resolve_backend("remap_locs", device, backend).ops["remap_locs"])


def plan_forward(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    prefix_lens: Sequence[int],
    seq_lens: Sequence[int],
    out_cache_loc: torch.Tensor,
    geo: ScratchGeometry,
    num_pages: int,
    *,
    kept_rows: Sequence[int] | None = None,
    ops: ShardOps | None = None,
) -> ForwardScratch:
    """Plan one forward from SGLang's batch, with one host read (see the module docstring).

    :func:`draft_forward` (``cpkv_runtime``'s ``shard_plan`` op, the CUDA kernels when there is
    a GPU: every tensor of the plan), one ``.tolist()`` of ``3 + N`` numbers (the layout's
    status, its slot count, where each rank's run of gathered slots ends, the all-gather's
    block), then :func:`finish_forward` (checks, no device work).

    Args:
        req_to_token: (rows, cols) SGLang's token locations of each request's positions; a
            request's page ``j`` is the page of its position ``j * P``.
        req_pool_indices: (B,) the batch's rows of ``req_to_token``.
        prefix_lens, seq_lens: (B,) host lengths (``extend_prefix_lens_cpu``, ``seq_lens_cpu``).
        out_cache_loc: (T,) the batch's current-token locations, request-major.
        geo: the pool's scratch geometry.
        num_pages: logical pages of the pool (``N * (size / P + 1)``).
        kept_rows: requests this rank keeps rows for under interleave CP (SGLang's ``bs_idx``),
            or None when the batch is not split.
        ops: the resolved ops (default: resolved here).

    Raises:
        ScratchCapacityError: the batch does not fit the scratch.
        cpkv_runtime.LayoutError: bad lengths, a request listing a page twice, or pages
            outside the pool.
        ValueError: ``out_cache_loc`` does not hold one location per current token.
    """
    prefix = [int(x) for x in prefix_lens]
    extend = [int(s) - q for s, q in zip(seq_lens, prefix, strict=True)]
    draft = draft_forward(req_to_token, req_pool_indices, prefix, extend, out_cache_loc, geo,
                          num_pages, kept_rows, ops)  # fmt: skip
    host_numbers = draft.outputs[0].tolist()  # the forward's one host read
    return finish_forward(draft, host_numbers, geo)


@dataclass(eq=False)
class ForwardDraft:
    """The device half of :func:`plan_forward`, before its one host read.

    Attributes:
        outputs: the ``shard_plan`` op's tensors (``cpkv_runtime``'s contract, without the
            layout): ``host`` (the (3 + N,) numbers the host reads: status, used slots, where
            each rank's run of gathered slots ends, the block), ``inverse``, ``rows``
            (``0 .. B - 1``), ``kept``, ``slot_scratch``, ``send_pages``, ``token_req``,
            ``cur_rows``, ``local_rows``.
        args: the op's arguments, to plan the layout again when asked (``with_layout``).
        prefix, extend: (B,) host lengths. kept: the interleave-CP rows, or None.
        out_cache_loc: (T,) as passed. ops: the ops.
    """

    outputs: list[torch.Tensor]
    args: tuple
    prefix: tuple[int, ...]
    extend: tuple[int, ...]
    kept: tuple[int, ...] | None
    out_cache_loc: torch.Tensor
    ops: ShardOps

    def layout(self, used: int | None = None) -> cr.Layout:
        """The batch's layout: the op again with its layout outputs, cut to ``used`` slots
        (``plan_layout``'s exact layout), or padded when None (to re-raise a bad input). It
        reads ``req_to_token`` again: ask before SGLang reuses the batch's rows (tests and the
        error path do; the forward itself never asks)."""
        out = self.ops.plan(*self.args, True)
        p, num_pages = self.args[6], self.args[7]
        inverse, (slot_page, pages, prefix, extend, seq, pages_used, table, owner, used_slots,
                  status, _) = out[1], out[12:]  # fmt: skip
        tensors = (pages, prefix, extend, seq, pages_used, table)
        if used is None:
            return cr.Layout(p, num_pages, True, *tensors, slot_page, owner, inverse,
                             sum(self.extend), used_slots, status)  # fmt: skip
        return cr.Layout(p, num_pages, True, *tensors, slot_page[:used], owner[:used], inverse,
                         sum(self.extend))  # fmt: skip


def draft_forward(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    prefix: Sequence[int],
    extend: Sequence[int],
    out_cache_loc: torch.Tensor,
    geo: ScratchGeometry,
    num_pages: int,
    kept_rows: Sequence[int] | None = None,
    ops: ShardOps | None = None,
) -> ForwardDraft:
    """The host checks, then the ``shard_plan`` op (device work only, no read).

    The capacity passed is ``sum(ceil(seq / P))`` slots (always enough) and the width
    ``max(ceil(seq / P))``; what the host knows (lengths, kept rows) travels in the first
    kernel's parameters (a copy from pinned memory when there are too many: a copy from
    pageable memory stalls the host, and ``set_sync_debug_mode`` does not see that stall).

    Raises:
        cpkv_runtime.LayoutError: a negative length.
        ValueError: ``out_cache_loc`` does not hold one location per current token.
    """
    p = geo.page_size
    prefix, extend = tuple(map(int, prefix)), tuple(map(int, extend))
    num_tokens = sum(extend)
    if min(prefix + extend, default=0) < 0:
        raise cr.LayoutError(
            f"negative lengths: prefix_lens {list(prefix)}, extend_lens {list(extend)} "
            f"(seq_lens - prefix_lens); fix: pass seq_lens >= prefix_lens >= 0"
        )
    if out_cache_loc.dim() != 1 or out_cache_loc.numel() != num_tokens:
        raise ValueError(
            f"out_cache_loc has shape {tuple(out_cache_loc.shape)} but the batch has "
            f"{num_tokens} current tokens (extend lengths {list(extend)}); the shared-KV "
            f"scratch needs one location per current token, in request order"
        )
    pages = [-(-(q + e) // p) for q, e in zip(prefix, extend, strict=True)]
    kept = None if kept_rows is None else tuple(int(b) for b in kept_rows)
    ops = ops or shard_ops(out_cache_loc.device)
    args = (req_to_token, req_pool_indices, out_cache_loc, [*prefix, *extend], list(kept or ()),
            max(pages, default=0), p, num_pages, sum(pages), geo.shard_size, geo.shard_rank,
            geo.write_base, geo.trash_page)  # fmt: skip
    return ForwardDraft(ops.plan(*args, False), args, prefix, extend, kept, out_cache_loc, ops)


def finish_forward(
    draft: ForwardDraft, host_numbers: Sequence[int], geo: ScratchGeometry
) -> ForwardScratch:
    """The rest of the plan from the host numbers (``draft.outputs[0]`` read back): the input
    and capacity checks; no device work (the op placed everything with the block it found).

    Raises:
        ScratchCapacityError: the batch does not fit the scratch.
        cpkv_runtime.LayoutError: a request lists a page twice, or pages outside the pool.
    """
    p, n = geo.page_size, geo.shard_size
    _, inverse, rows, kept, slot_scratch, send_pages, token_req, cur_rows, local_rows = (
        draft.outputs
    )
    status, used, *ends, block = host_numbers
    if status:  # bad input: plan_layout's own message (its checks rerun, off the hot path)
        draft.layout().verify()
        raise AssertionError(f"layout status {status}, yet Layout.verify() passed")
    if len(ends) != n:
        raise ValueError(f"host_numbers holds {len(ends)} rank counts for {n} ranks")
    owned = tuple(e - b for b, e in zip([0, *ends[:-1]], ends, strict=True))
    num_fresh = used - ends[-1]
    if n * block > geo.gather_pages or num_fresh > geo.write_pages:
        raise ScratchCapacityError(
            f"this batch needs {n} x {block} gather pages (ranks own {list(owned)} of its "
            f"{ends[-1]} history slots) and {num_fresh} write pages, but the scratch holds "
            f"{geo.gather_pages} and {geo.write_pages}; admission should have deferred it. Fix: "
            f"raise the scratch (longer --context-length budget or --chunked-prefill-size) or "
            f"send fewer long prefixes per batch"
        )
    table_req = rows if draft.kept is None else kept
    placement = ScratchPlacement(inverse, p, used, slot_scratch, block, owned, num_fresh,
                                 send_pages[:block], partial(draft.layout, used))  # fmt: skip
    return ForwardScratch(
        placement=placement,
        out_cache_loc=draft.out_cache_loc,
        token_req=token_req,
        cur_rows=cur_rows,
        local_rows=local_rows,
        table_req=table_req,
        remap=draft.ops.remap,
        stage_after_gather=any(
            q % p and e for q, e in zip(draft.prefix, draft.extend, strict=True)
        ),
    )
