"""The dense layout: one slot per (request, page), deduplicated where it is safe.

Keying by ``(request, page)`` instead of by page value is the fix for the cross-request KV bug
(docs/design.md, "The bug this exists to fix"): a value-keyed inverse ``inverse[page] = slot``
is last-writer-wins, so at batch size > 1 one request can be remapped into another's slot and
read its current KV.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from ._checks import any_true, as_index, check_count, raise_first, same_device, snippet
from ._dispatch import dispatch
from ._layout_budget import check_layout_budget
from ._torch_ops import current_page_mask as current_page_mask_torch
from ._torch_plan import STATUS_CAPACITY
from .errors import LayoutError

__all__ = ["Layout", "current_tokens", "plan_layout"]


@dataclass(frozen=True, eq=False)
class Layout:
    """Where every ``(request, page)`` of a batch lives in the dense buffer.

    All tensors are int32 on the device of ``req_pages``; -1 = absent. ``B`` requests, ``M`` =
    ``req_pages.shape[1]``, ``S`` = ``num_slots``.

    Attributes:
        page_size: ``P``, tokens per page.
        num_pages: pool size; pool pages are ``0 .. num_pages - 1``.
        dedup: whether read-only pairs naming one page share a slot.
        req_pages: (B, M) request b's j-th pool page, -1 at ``j >= pages_used[b]`` (whatever the
            input held there).
        prefix_lens, extend_lens, seq_lens: (B,) tokens in the pool / current / both.
        pages_used: (B,) ``ceil(seq_lens / P)``.
        slot_table: (B, M) slot of request b's j-th page, -1 at ``j >= pages_used[b]``.
        slot_page: (S,) the source pool page of each slot.
        slot_owner: (S,) the request that writes the slot, -1 for a read-only slot.
        inverse: (B, num_pages) ``inverse[b, page]`` = b's slot for that page, -1 if b does not
            use it. Dense location of request b's pool location ``loc``:
            ``inverse[b, loc // P] * P + loc % P``.
        num_tokens: ``T = sum(extend_lens)``, the current tokens of the batch.
        used_slots: None for :func:`plan_layout` (every slot used). From
            :func:`plan_layout_static`: (1,) int32 on the device, the slots the batch needs;
            ``S`` is then the capacity ``max_slots`` and ``slot_page``/``slot_owner`` hold -1
            from ``used_slots`` on (padding slots, which no request uses).
        status: None for :func:`plan_layout`. From :func:`plan_layout_static`: (1,) int32 on the
            device, 0 when the input was valid and fit ``max_slots`` (see :meth:`verify`).
    """

    page_size: int
    num_pages: int
    dedup: bool
    req_pages: torch.Tensor
    prefix_lens: torch.Tensor
    extend_lens: torch.Tensor
    seq_lens: torch.Tensor
    pages_used: torch.Tensor
    slot_table: torch.Tensor
    slot_page: torch.Tensor
    slot_owner: torch.Tensor
    inverse: torch.Tensor
    num_tokens: int
    used_slots: torch.Tensor | None = None
    status: torch.Tensor | None = None

    @property
    def padded(self) -> bool:
        """True for :func:`plan_layout_static`'s fixed-capacity layouts."""
        return self.used_slots is not None

    @property
    def batch_size(self) -> int:
        return self.req_pages.shape[0]

    @property
    def max_pages(self) -> int:
        return self.req_pages.shape[1]

    @property
    def num_slots(self) -> int:
        return self.slot_page.shape[0]

    @property
    def device(self) -> torch.device:
        return self.req_pages.device

    def materialize_bytes(self, row_bytes: int) -> int:
        """Bytes :func:`materialize` writes (and reads): ``num_slots * P * row_bytes``."""
        return self.num_slots * self.page_size * int(row_bytes)

    def verify(self) -> Layout:
        """Raise :class:`LayoutError` if the device-side checks of a padded layout failed.

        One host sync for a padded layout planned with ``validate=False`` (a no-op otherwise:
        :func:`plan_layout` validates before planning). The message is :func:`plan_layout`'s for
        the same input, or names the capacity a batch needs.

        Returns:
            ``self``, for chaining.
        """
        if self.status is None or self.used_slots is None:
            return self
        status, needed = (int(v) for v in torch.cat([self.status, self.used_slots]).tolist())
        if status:
            raise_for_status(self, status, needed)
        return self

    def exact(self) -> Layout:
        """This layout with the padding slots cut off (one host sync; ``self`` if not padded).

        The result equals :func:`plan_layout`'s for the same batch, tensor for tensor.
        """
        if self.used_slots is None:
            return self
        self.verify()
        n = int(self.used_slots)
        return replace(
            self,
            slot_page=self.slot_page[:n],
            slot_owner=self.slot_owner[:n],
            used_slots=None,
            status=None,
        )

    def __repr__(self) -> str:
        capacity = "" if self.used_slots is None else " (capacity; padded)"
        return (
            f"Layout(B={self.batch_size}, max_pages={self.max_pages}, num_slots={self.num_slots}"
            f"{capacity}, page_size={self.page_size}, num_pages={self.num_pages}, "
            f"dedup={self.dedup}, num_tokens={self.num_tokens}, device={self.device})"
        )


def raise_for_status(layout: Layout, status: int, needed: int) -> None:
    """Raise the :class:`LayoutError` a nonzero ``status`` of ``plan_slots`` stands for.

    Bad input is reported exactly as :func:`plan_layout` reports it (its checks rerun on the
    layout's tensors, which keep every used entry as given); else the capacity was too small.
    """
    if status & ~STATUS_CAPACITY:
        _validate(
            layout.req_pages,
            layout.prefix_lens,
            layout.extend_lens,
            layout.page_size,
            layout.num_pages,
        )
        raise AssertionError(f"plan_slots status {status}, yet plan_layout's checks pass")
    raise LayoutError(
        f"the batch needs {needed} dense slots but max_slots = {layout.num_slots}; fix: pass "
        f"max_slots >= sum(ceil(seq_lens / page_size)) (known on the host), or leave it None "
        f"(B * max_pages, always enough)"
    )


def _validate(
    req_pages: torch.Tensor,
    prefix: torch.Tensor,
    extend: torch.Tensor,
    page_size: int,
    num_pages: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All of plan_layout's input checks (one host sync on valid input); (pages_used, used)."""
    bsz, max_pages = req_pages.shape
    for name, lens in (("prefix_lens", prefix), ("extend_lens", extend)):
        if lens.shape[0] != bsz:
            raise LayoutError(
                f"{name} has {lens.shape[0]} entries but req_pages has {bsz} rows (requests); "
                f"fix: pass one length per request"
            )
    seq = prefix.long() + extend.long()
    pages_used = torch.div(seq + page_size - 1, page_size, rounding_mode="floor")
    j = torch.arange(max_pages, device=req_pages.device)
    used = j.unsqueeze(0) < pages_used.unsqueeze(1)
    too_long = pages_used > max_pages
    bad_page = used & ((req_pages < 0) | (req_pages >= num_pages))
    # Duplicates inside a request: sort the used pages of each row, compare neighbours.
    keyed = torch.where(used, req_pages.long(), num_pages + j.unsqueeze(0))
    ordered, perm = torch.sort(keyed, dim=1, stable=True)
    twice = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] < num_pages)
    if not any_true(prefix < 0, extend < 0, too_long, bad_page, twice):
        return pages_used, used

    def too_long_msg(at: tuple[int, ...]) -> str:
        b = at[0]
        return (
            f"request {b} has seq_len {int(seq[b])} = prefix {int(prefix[b])} + extend "
            f"{int(extend[b])}, which needs ceil({int(seq[b])}/{page_size}) = "
            f"{int(pages_used[b])} pages, but req_pages has only {max_pages} columns; "
            f"fix: widen req_pages or check the lengths"
        )

    def bad_page_msg(at: tuple[int, ...]) -> str:
        b, jj = at
        page = int(req_pages[b, jj])
        why = "is -1 (absent)" if page == -1 else f"is out of range for a pool of {num_pages} pages"
        return (
            f"req_pages[{b}][{jj}] = {page} {why}, but request {b} uses pages j < "
            f"{int(pages_used[b])} (seq_len {int(seq[b])}, page_size {page_size}); "
            f"fix: list a valid pool page for every used page"
        )

    def twice_msg(at: tuple[int, ...]) -> str:
        b, k = at
        j1, j2 = sorted((int(perm[b, k]), int(perm[b, k + 1])))
        page = int(req_pages[b, j2])
        row = [int(v) for v in req_pages[b, : j2 + 1].tolist()]
        shown = snippet(row, j2) if j2 - j1 == 1 else f"[.., {page}, .., {page}]"
        return (
            f"req_pages[{b}] lists page {page} twice (j={j1} and j={j2}); a request may use a "
            f"page once (got pages {shown})"
        )

    for name, lens in (("prefix_lens", prefix), ("extend_lens", extend)):
        raise_first(lens < 0, lambda at, n=name, x=lens: f"{n}[{at[0]}] = {int(x[at])} is negative")
    raise_first(too_long, too_long_msg)
    raise_first(bad_page, bad_page_msg)
    raise_first(twice, twice_msg)
    raise AssertionError("a check failed but reported nothing")  # unreachable


def plan_layout(
    req_pages: torch.Tensor | Sequence[Sequence[int]],
    prefix_lens: torch.Tensor | Sequence[int],
    extend_lens: torch.Tensor | Sequence[int],
    page_size: int,
    num_pages: int,
    *,
    dedup: bool = True,
    backend: str | None = None,
    max_bytes: int | None = None,
) -> Layout:
    """Give every ``(request, page)`` of a batch a dense slot, and build the per-request inverse.

    A page whose tokens are all history for b is *read-only* for b; a page holding any of b's
    current tokens is *written* by b. Written pairs always get a private slot owned by b;
    read-only pairs naming the same pool page share one slot (``dedup=False``: every pair gets its
    own slot).

    Slot numbering (deterministic, backends reproduce ``inverse`` bitwise): scan the used pairs
    ``(b, j)`` row-major (b, then j). A pair gets the next new slot number, unless it is read-only,
    ``dedup`` is on and an earlier read-only pair named the same pool page: then it takes that
    pair's slot. So slots appear in order of first use; without sharing, request b's pages are
    one contiguous run of slots.

    Args:
        req_pages: (B, M) int32/int64 pool pages of each request in order. Request b uses
            ``j < ceil(seq_lens[b] / P)``; entries past that are ignored (typically -1).
        prefix_lens: (B,) tokens already in the pool (history).
        extend_lens: (B,) current tokens (0 allowed).
        page_size: ``P`` (64 for DSA on CUDA).
        num_pages: pool size.
        dedup: share read-only slots across requests.
        backend: force the backend that builds ``inverse`` (``torch``/``triton``/``cuda``).
        max_bytes: memory budget of the plan. Default: ``$CPKV_LAYOUT_MAX_BYTES``, else what the
            device can host now (CUDA: free plus cached-unused memory; CPU: ``MemAvailable``).
            The size follows from the shapes: ``inverse`` alone is ``B * num_pages * 4`` bytes.

    Returns:
        A frozen :class:`Layout` on ``req_pages``'s device.

    Raises:
        LayoutError: out-of-range or -1 pages where a request uses them, a page listed twice by
            one request, lengths that disagree, non-integer indices, mixed devices; a plan over
            the budget, before anything of its size is allocated (``_layout_budget``).
    """
    page_size = check_count(page_size, "page_size", 1)
    num_pages = check_count(num_pages, "num_pages", 1)
    req_pages = as_index(req_pages, "req_pages", 2)
    prefix = as_index(prefix_lens, "prefix_lens", 1, req_pages.device)
    extend = as_index(extend_lens, "extend_lens", 1, req_pages.device)
    same_device(req_pages=req_pages, prefix_lens=prefix, extend_lens=extend)
    check_layout_budget("plan_layout", req_pages, num_pages, None, max_bytes)
    pages_used, used = _validate(req_pages, prefix, extend, page_size, num_pages)

    bsz, max_pages = req_pages.shape
    device = req_pages.device
    pages = torch.where(used, req_pages.long(), -1)
    written = current_page_mask_torch(pages, prefix, extend, page_size)
    pair = torch.arange(bsz * max_pages, device=device).view(bsz, max_pages)
    private = written if dedup else used
    key = torch.where(private, num_pages + pair, pages)  # read-only key = page -> shared slot
    flat = torch.nonzero(used.reshape(-1)).squeeze(1)  # used pairs, row-major
    uniq, inv = torch.unique(key.reshape(-1)[flat], return_inverse=True)
    first = torch.full((uniq.shape[0],), bsz * max_pages, dtype=torch.long, device=device)
    first.scatter_reduce_(0, inv, flat, reduce="amin")
    rank = torch.empty_like(first)
    rank[torch.argsort(first)] = torch.arange(first.shape[0], device=device)
    slot = rank[inv]

    slot_table = torch.full((bsz, max_pages), -1, dtype=torch.int32, device=device)
    slot_table.view(-1)[flat] = slot.to(torch.int32)
    slot_page = torch.empty(uniq.shape[0], dtype=torch.int32, device=device)
    slot_page[slot] = pages.reshape(-1)[flat].to(torch.int32)
    slot_owner = torch.full((uniq.shape[0],), -1, dtype=torch.int32, device=device)
    owned = written.reshape(-1)[flat]
    slot_owner[slot[owned]] = torch.div(flat[owned], max_pages, rounding_mode="floor").int()

    req_pages_clean = pages.to(torch.int32)
    inverse = dispatch("build_inverse", device, backend)(slot_table, req_pages_clean, num_pages)
    return Layout(
        page_size=page_size,
        num_pages=num_pages,
        dedup=bool(dedup),
        req_pages=req_pages_clean,
        prefix_lens=prefix.to(torch.int32),
        extend_lens=extend.to(torch.int32),
        seq_lens=(prefix.long() + extend.long()).to(torch.int32),
        pages_used=pages_used.to(torch.int32),
        slot_table=slot_table,
        slot_page=slot_page,
        slot_owner=slot_owner,
        inverse=inverse,
        num_tokens=int(extend.long().sum()),
    )


def current_tokens(layout: Layout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch's current tokens, flattened request-major, as the pool addresses them.

    Returns:
        token_req: (T,) int32 request of each current token.
        token_pos: (T,) int32 position inside its request (``prefix_lens[b] + i``).
        out_cache_loc: (T,) int32 pool location ``req_pages[b, pos // P] * P + pos % P``.
    """
    device = layout.device
    extend = layout.extend_lens.long()
    token_req = torch.repeat_interleave(  # output_size: no host sync for the length
        torch.arange(layout.batch_size, device=device), extend, output_size=layout.num_tokens
    )
    starts = torch.cumsum(extend, 0) - extend
    token_pos = layout.prefix_lens.long()[token_req] + (
        torch.arange(layout.num_tokens, device=device) - starts[token_req]
    )
    page_size = layout.page_size
    page = layout.req_pages.long()[
        token_req, torch.div(token_pos, page_size, rounding_mode="floor")
    ]
    loc = page * page_size + token_pos % page_size
    return token_req.int(), token_pos.int(), loc.int()
