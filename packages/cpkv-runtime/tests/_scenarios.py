"""Named batches: the validation scenarios (docs/design.md), the adversarial groups, marked data.

Pool rows carry ``(page, offset)`` and current rows ``(-1 - request, position)`` as int32 words, so
a row read from the wrong place names its source.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import cpkv_runtime as cr
import torch


@dataclass(frozen=True)
class Batch:
    name: str
    req_pages: list[list[int]]
    prefix: list[int]
    extend: list[int]
    page_size: int
    num_pages: int
    shared_written: bool = False  # a page two requests list is written by one: legacy breaks

    @property
    def batch_size(self) -> int:
        return len(self.req_pages)

    def plan(self, **kwargs) -> cr.Layout:
        return cr.plan_layout(
            self.req_pages, self.prefix, self.extend, self.page_size, self.num_pages, **kwargs
        )

    def only(self, b: int) -> Batch:
        """Request b alone (batch size 1), on the same pool."""
        return replace(
            self,
            name=f"{self.name}[{b}]",
            req_pages=[self.req_pages[b]],
            prefix=[self.prefix[b]],
            extend=[self.extend[b]],
            shared_written=False,
        )


def pad(rows: list[list[int]], width: int | None = None, fill: int = -1) -> list[list[int]]:
    width = width or max((len(r) for r in rows), default=0)
    return [r + [fill] * (width - len(r)) for r in rows]


def pool_for(batch: Batch, words: int = 4) -> torch.Tensor:
    """(num_pages, P, words) int32, row (p, o) = [p, o, 7, 7, ...]."""
    p = torch.arange(batch.num_pages).view(-1, 1, 1).expand(-1, batch.page_size, 1)
    o = torch.arange(batch.page_size).view(1, -1, 1).expand(batch.num_pages, -1, 1)
    rest = torch.full((batch.num_pages, batch.page_size, words - 2), 7)
    return torch.cat([p, o, rest], dim=2).int().contiguous()


def current_for(layout: cr.Layout, words: int = 4, markers: list[int] | None = None):
    """(T, words) int32, row t = [-1 - marker of its request, position, 9, 9, ...].

    ``markers[b]`` names request b (default b); batch-1 reruns pass the batch-N marker.
    """
    token_req, token_pos, _ = cr.current_tokens(layout)
    marker = torch.tensor(markers if markers is not None else range(layout.batch_size))
    marker = marker.to(torch.int32)[token_req.long()]
    rest = torch.full((layout.num_tokens, words - 2), 9, dtype=torch.int32)
    return torch.cat([(-1 - marker).view(-1, 1), token_pos.view(-1, 1), rest], dim=1)


# --- the validation scenarios of docs/design.md (P = 8 keeps them readable) ---


def shared_prefix_pages() -> Batch:
    """Four requests on one radix prefix of 20 tokens: pages 10, 11 full, 12 holds 4 rows and is
    where each request's current chunk starts."""
    rows = [[10, 11, 12, 20 + b] for b in range(4)]
    return Batch("shared_prefix_pages", rows, [20] * 4, [9, 5, 12, 3], 8, 32, shared_written=True)


def shared_prefix_read_only() -> Batch:
    """Three requests share two full prefix pages read-only; current tokens on private pages."""
    rows = pad([[1, 2, 5, 6], [1, 2, 7], [1, 2, 8, 9, 10]])
    return Batch("shared_prefix_read_only", rows, [16, 16, 16], [10, 3, 20], 8, 16)


def cache_miss_mixed() -> Batch:
    """Two prefix hits sharing page 3, and a cache miss (prefix 0) on fresh pages in between."""
    rows = pad([[3, 4, 5], [6, 7, 8], [3, 9]])
    return Batch("cache_miss_mixed", rows, [8, 0, 8], [9, 17, 4], 8, 16)


def prefix_not_page_aligned() -> Batch:
    """Prefix 13 with P=8: page j=1 holds history rows 8..12 and current rows 13..; A and B share
    it (a hit that does not end on a page boundary)."""
    rows = pad([[40, 41, 42], [40, 41], [50, 51, 52]])
    return Batch("prefix_not_page_aligned", rows, [13, 13, 21], [6, 2, 1], 8, 64, True)


def extend_not_divisible() -> Batch:
    """Extends 7, 13, 1, 9, 0: none divisible by 2*cp for cp in {2, 3, 4, 8}."""
    rows = pad([[1, 11], [1, 4, 5, 6], [7], [1, 2, 8, 10], [9]])
    return Batch("extend_not_divisible", rows, [8, 8, 4, 16, 5], [7, 13, 1, 9, 0], 8, 16)


def tiny_extends() -> Batch:
    """1- and 2-token extends, one of them starting exactly on a fresh page."""
    rows = pad([[1, 2, 3], [1, 2, 4], [1, 5], [1, 6]])
    return Batch("tiny_extends", rows, [17, 16, 8, 15], [1, 2, 1, 1], 8, 8)


def pages_allocated_same_step() -> Batch:
    """A and B are cache misses allocated in one step (interleaved pages); A's second fresh page
    (7) is still listed by C as history — freed and handed out again in the same step."""
    rows = pad([[5, 7, 9], [6, 8, 10], [2, 7, 11]])
    return Batch("pages_allocated_same_step", rows, [0, 0, 16], [20, 17, 3], 8, 16, True)


def eviction_churn() -> list[Batch]:
    """Three consecutive steps; pages freed by finished requests are reused by others."""
    step1 = Batch("eviction_churn/1", pad([[0, 1, 2], [0, 3]]), [16, 8], [5, 6], 8, 6)
    step2 = Batch("eviction_churn/2", pad([[0, 1, 2, 4], [5, 3], [0, 1]]), [21, 14], [3, 9], 8, 6)
    step2 = replace(step2, prefix=[21, 14, 16], extend=[3, 2, 0])
    step3 = Batch(
        "eviction_churn/3", pad([[3, 1, 2], [0, 1, 4], [5, 3]]), [8, 16, 16], [9, 7, 0], 8, 6
    )
    return [step1, step2, replace(step3, shared_written=True)]


SCENARIOS = {
    b.name: b
    for b in (
        shared_prefix_pages(),
        shared_prefix_read_only(),
        cache_miss_mixed(),
        prefix_not_page_aligned(),
        extend_not_divisible(),
        tiny_extends(),
        pages_allocated_same_step(),
        *eviction_churn(),
    )
}


# --- adversarial groups (named as in FlashMLA's tests) ---

ADVERSARIAL = {
    "shared_prefix_pages": shared_prefix_pages(),
    # -1 padding past the used pages, stale page ids (request 2) too, and the pool's last page in
    # use: a naive ``inverse[req_pages] = slots`` would let -1 entries clobber its cell.
    "minus_one_padding": Batch(
        "minus_one_padding",
        [[15, -1, -1, -1], [15, 14, 3, -1], [2, 9, 14, 15]],
        [8, 8, 3],
        [0, 10, 2],
        8,
        16,
    ),
    "empty_request": Batch(
        "empty_request", pad([[1, 2], [], [1, 3], [4]]), [9, 0, 8, 3], [0, 0, 5, 0], 8, 8
    ),
    "page_boundary": Batch(
        "page_boundary",
        pad([[1, 2], [1, 3, 4], [1, 5], [6, 7]]),
        [8, 8, 15, 0],
        [8, 9, 1, 16],
        8,
        8,
    ),
}

DUPLICATE_PAGE_IN_REQUEST = Batch(
    "duplicate_page_in_request",
    pad([[3, 4], [5, 6], [1, 2, 917, 917]]),
    [8, 8, 20],
    [3, 3, 10],
    8,
    1024,
)


# --- the whole pipeline, new layout vs oracle ---


@dataclass
class Run:
    layout: cr.Layout
    kv_pool: torch.Tensor
    dense: torch.Tensor
    current_kv: torch.Tensor
    token_req: torch.Tensor
    token_pos: torch.Tensor
    out_cache_loc: torch.Tensor


def run(
    batch: Batch,
    backend: str | None = None,
    dedup: bool = True,
    words: int = 4,
    markers: list[int] | None = None,
) -> Run:
    """plan -> materialize -> fill_current with marker data."""
    layout = batch.plan(dedup=dedup, backend=backend)
    kv_pool = pool_for(batch, words)
    current_kv = current_for(layout, words, markers)
    token_req, token_pos, loc = cr.current_tokens(layout)
    dense = cr.materialize(kv_pool, layout, backend=backend)
    cr.fill_current(dense, current_kv, token_req, loc, layout, backend=backend)
    return Run(layout, kv_pool, dense, current_kv, token_req, token_pos, loc)


def oracle_dense(batch: Batch, kv_pool: torch.Tensor, current_kv: torch.Tensor | None, dedup=True):
    """The oracle's dense buffer for the same batch and data, as a tensor (no fill if None)."""
    import _oracle

    lay = _oracle.plan(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages, dedup
    )
    dense = _oracle.materialize(kv_pool, lay)
    reqs, _, locs = _oracle.current_tokens(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size
    )
    if current_kv is not None:
        _oracle.fill_current(dense, current_kv, reqs, locs, lay)
    return lay, _oracle.stack(dense, kv_pool)


def reads(r: Run) -> dict[tuple[int, int], torch.Tensor]:
    """{(b, i): row} as request b reads position i through remap_positions."""
    lay = r.layout
    out = {}
    for b in range(lay.batch_size):
        seq = int(lay.seq_lens[b])
        pos = torch.arange(seq, dtype=torch.int32).view(1, -1)
        dense_loc = cr.remap_positions(pos, torch.tensor([b]), lay)[0]
        flat = r.dense.reshape(-1, *r.dense.shape[2:])
        for i in range(seq):
            out[(b, i)] = flat[int(dense_loc[i])]
    return out
