"""One forward's scratch plan, and every lookup the per-layer path makes through it.

:func:`plan_forward` runs once per forward (attention-metadata time): it plans the
``cpkv_runtime`` static layout, places its slots (:mod:`._plan`) and precomputes, on the device,
the scratch row of every current token and the local pool row it persists to. It reads the
device once: :func:`draft_forward` (device work) and :func:`finish_forward` (device work) are
split around one ``.tolist()`` of a (2 + N,) tensor (the layout's status and slot count, each
rank's gathered slots), which also carries the input and capacity checks. The lookups below are
what SGLang's pool methods call per layer; they use only tensors of the plan (no host sync), and
each distinct table is translated once per forward.

Which request a row belongs to:

- a 1-D location tensor is the batch's ``out_cache_loc`` (its tokens' requests are
  ``token_req``); at batch size 1 any 1-D tensor belongs to request 0;
- a 2-D table (the attention page table, the indexer's page table) has one row per request:
  all ``B`` requests, or under interleave CP the ``bs_idx`` requests this rank keeps rows for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import cpkv_runtime as cr
import torch

from sglang_cpkv.shared_kv._plan import (
    ScratchGeometry,
    ScratchPlacement,
    SlotOrder,
    assign_slots,
    order_slots,
    owned_local_rows,
    owned_rows,
    to_scratch,
    upload_ints,
)

__all__ = [
    "ForwardDraft",
    "ForwardScratch",
    "TranslationError",
    "draft_forward",
    "finish_forward",
    "plan_forward",
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
        row_req: number of rows -> (R,) int64 request of each row of a 2-D table.
        stage_after_gather: some page holds history *and* current rows of one request (a prefix
            that ends mid-page), so its private slot is both gathered and staged: the stores of
            a layer must wait for that layer's gather (otherwise they are disjoint from it).
    """

    placement: ScratchPlacement
    out_cache_loc: torch.Tensor
    token_req: torch.Tensor
    cur_rows: torch.Tensor
    local_rows: torch.Tensor
    row_req: dict[int, torch.Tensor]
    stage_after_gather: bool = False
    _cache: dict[tuple, torch.Tensor] = field(default_factory=dict)

    @property
    def page_size(self) -> int:
        return self.placement.layout.page_size

    @property
    def batch_size(self) -> int:
        return self.placement.layout.batch_size

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

    def _rows_of(self, n: int, what: str) -> torch.Tensor:
        req = self.row_req.get(n)
        if req is None:
            raise TranslationError(
                f"{what} has {n} rows, but this forward's tables have one row per request "
                f"({sorted(self.row_req)} rows); a per-request scratch lookup needs the request "
                f"of every row. Fix: translate page tables built from this batch's requests"
            )
        return req

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
        key = ("loc", loc.data_ptr(), tuple(loc.shape), loc.stride())
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if loc.dim() == 2:
            req = self._rows_of(loc.shape[0], "the page table")
            dense = cr.remap_locs(loc, req, self.placement.layout, validate=False)
        elif loc.dim() == 1 and self.batch_size == 1:
            req = torch.zeros(loc.shape[0], dtype=torch.long, device=loc.device)
            dense = cr.remap_locs(loc, req, self.placement.layout, validate=False)
        else:
            raise TranslationError(
                f"a {loc.dim()}-D location tensor of shape {tuple(loc.shape)} is not this "
                f"forward's out_cache_loc, and at batch size {self.batch_size} its locations "
                f"cannot be given a request (a page two requests list maps to two slots). Fix: "
                f"pass the batch's out_cache_loc, or a page table with one row per request"
            )
        rows = to_scratch(dense, self.placement.slot_scratch, self.page_size)
        self._cache[key] = rows
        return rows

    def scratch_pages(self, pages: torch.Tensor) -> torch.Tensor:
        """Logical page ids (R, W), one row per request -> scratch pages, each by its request."""
        key = ("page", pages.data_ptr(), tuple(pages.shape), pages.stride())
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if pages.dim() != 2:
            raise TranslationError(
                f"indexer page table must be 2-D (one row per request), got {tuple(pages.shape)}"
            )
        req = self._rows_of(pages.shape[0], "the indexer page table")
        inverse = self.placement.layout.inverse
        slot = inverse[req.unsqueeze(1), pages.long().clamp(0, inverse.shape[1] - 1)]
        out = self.placement.slot_scratch[slot.long()]
        self._cache[key] = out
        return out


def plan_forward(
    req_pages: torch.Tensor,
    prefix_lens: Sequence[int],
    seq_lens: Sequence[int],
    out_cache_loc: torch.Tensor,
    geo: ScratchGeometry,
    num_pages: int,
    *,
    kept_rows: Sequence[int] | None = None,
) -> ForwardScratch:
    """Plan one forward from SGLang's batch, with one host read (see the module docstring).

    Args:
        req_pages: (B, M) each request's logical pages (:func:`request_pages`), -1 past its use.
        prefix_lens, seq_lens: (B,) host lengths (``extend_prefix_lens_cpu``, ``seq_lens_cpu``).
        out_cache_loc: (T,) the batch's current-token locations, request-major.
        geo: the pool's scratch geometry.
        num_pages: logical pages of the pool (``N * (size / P + 1)``).
        kept_rows: requests this rank keeps rows for under interleave CP (SGLang's ``bs_idx``),
            or None when the batch is not split.

    Raises:
        ScratchCapacityError: the batch does not fit the scratch.
        cpkv_runtime.LayoutError: a request lists a page twice, or pages outside the pool.
        ValueError: ``out_cache_loc`` does not hold one location per current token.
    """
    prefix = [int(x) for x in prefix_lens]
    extend = [int(s) - q for s, q in zip(seq_lens, prefix, strict=True)]
    num_tokens = sum(extend)
    if out_cache_loc.dim() != 1 or out_cache_loc.numel() != num_tokens:
        raise ValueError(
            f"out_cache_loc has shape {tuple(out_cache_loc.shape)} but the batch has "
            f"{num_tokens} current tokens (extend lengths {extend}); the shared-KV scratch "
            f"needs one location per current token, in request order"
        )
    draft = draft_forward(req_pages, prefix, extend, out_cache_loc, geo, num_pages, kept_rows)
    host_numbers = draft.slots.host_numbers.tolist()  # the forward's one host read
    return finish_forward(draft, host_numbers, geo)


@dataclass(frozen=True, eq=False)
class ForwardDraft:
    """The device half of :func:`plan_forward`, before its one host read.

    Attributes:
        slots: the static layout's slots in gather order; ``slots.host_numbers`` is what the
            host reads (status, used slots, per-rank gathered slots).
        prefix, extend: (B,) host lengths.
        out_cache_loc, token_req, local_rows, row_req: as in :class:`ForwardScratch`.
        token_slot: (T,) int32 each current token's slot (``layout.inverse`` at its request and
            page; -1 only for a location on a page its request does not list).
        token_offset: (T,) int64 each current token's row in its page (``loc % P``).
    """

    slots: SlotOrder
    prefix: tuple[int, ...]
    extend: tuple[int, ...]
    out_cache_loc: torch.Tensor
    token_req: torch.Tensor
    token_slot: torch.Tensor
    token_offset: torch.Tensor
    local_rows: torch.Tensor
    row_req: dict[int, torch.Tensor]


def draft_forward(
    req_pages: torch.Tensor,
    prefix: Sequence[int],
    extend: Sequence[int],
    out_cache_loc: torch.Tensor,
    geo: ScratchGeometry,
    num_pages: int,
    kept_rows: Sequence[int] | None = None,
) -> ForwardDraft:
    """Everything of the plan that needs no host read (device work and one upload).

    What the host knows goes to the device in one non-blocking upload (pinned on CUDA): the
    lengths, the request ids, ``ceil(prefix / P)``, the owner-run bounds of the slot sort and the
    kept rows. The layout is :func:`cpkv_runtime.plan_layout_static` with the capacity and token
    count the host knows (``sum(ceil(seq_lens / P))`` slots always suffice) and its checks
    deferred to the status that :func:`finish_forward` reads with the rest.
    """
    p, n, device = geo.page_size, geo.shard_size, req_pages.device
    prefix, extend = tuple(int(x) for x in prefix), tuple(int(x) for x in extend)
    if min(prefix + extend, default=0) < 0:  # host-visible: plan_layout's own error, no upload
        cr.plan_layout(req_pages, prefix, extend, p, num_pages)
        raise AssertionError(f"negative lengths {prefix} / {extend} passed plan_layout")
    bsz, num_tokens = len(prefix), sum(extend)
    kept = [] if kept_rows is None else [int(b) for b in kept_rows]
    history = [-(-q // p) for q in prefix]
    rank_ends = [(r + 1) * num_pages for r in range(n)]
    upload = upload_ints([*prefix, *extend, *range(bsz), *history, *rank_ends, *kept], device)
    prefix_t, extend_t, rows_t, history_t, rank_ends_t, kept_t = upload.split(
        [bsz, bsz, bsz, bsz, n, len(kept)]
    )
    capacity = sum(-(-(q + e) // p) for q, e in zip(prefix, extend, strict=True))
    layout = cr.plan_layout_static(
        req_pages, prefix_t, extend_t, p, num_pages,
        max_slots=capacity, num_tokens=num_tokens, validate=False,
    )  # fmt: skip
    token_req = torch.repeat_interleave(extend_t, output_size=num_tokens)  # request of each token
    row_req = {bsz: rows_t}
    if kept_rows is not None:
        row_req.setdefault(len(kept), kept_t)
    # Per-token tables (one row per query token). Every extend holds >= 1 token, so T == B only
    # when each request extends by one (token_req == arange), and T >= B > len(kept) otherwise.
    row_req.setdefault(num_tokens, token_req)
    loc = out_cache_loc.long()
    page, offset = torch.div(loc, p, rounding_mode="floor"), loc % p
    return ForwardDraft(
        slots=order_slots(layout, geo, history_pages=history_t, rank_ends=rank_ends_t),
        prefix=prefix,
        extend=extend,
        out_cache_loc=out_cache_loc,
        token_req=token_req,
        token_slot=layout.inverse[token_req, page],
        token_offset=offset,
        local_rows=owned_rows(page, offset, p, n, geo.shard_rank),
        row_req=row_req,
    )


def finish_forward(
    draft: ForwardDraft, host_numbers: Sequence[int], geo: ScratchGeometry
) -> ForwardScratch:
    """The rest of the plan from the host numbers (``draft.slots.host_numbers`` read back):
    the input and capacity checks, then device work only.

    A current token's scratch row is its slot's scratch page times ``P`` plus its offset
    (``to_scratch`` of its ``remap_locs`` location, without the round trip through the dense
    location). A location on a page its request does not list (SGLang never passes one) has
    slot -1, which lands on the trash page like every absent lookup.

    Raises:
        ScratchCapacityError: the batch does not fit the scratch.
        cpkv_runtime.LayoutError: a request lists a page twice, or pages outside the pool.
    """
    p = geo.page_size
    placement = assign_slots(draft.slots, host_numbers, geo)
    return ForwardScratch(
        placement=placement,
        out_cache_loc=draft.out_cache_loc,
        token_req=draft.token_req,
        cur_rows=torch.add(draft.token_offset, placement.slot_scratch[draft.token_slot], alpha=p),
        local_rows=draft.local_rows,
        row_req=draft.row_req,
        stage_after_gather=any(
            q % p and e for q, e in zip(draft.prefix, draft.extend, strict=True)
        ),
    )
