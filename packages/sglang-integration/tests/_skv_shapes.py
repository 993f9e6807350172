"""SGLang-shaped batches for the shared-KV scratch tests, and the full-replica reference.

A batch is a list of requests; each names a prefix *chain* (requests on one chain share its
full pages, as radix-cache hits do), its history length and its extend length. Pages are
logical pages of a pool sharded over ``N`` ranks and allocated the way SGLang's
``PageInterleavePoolAllocator`` does: along a chain, position-page ``j`` is owned by rank
``(base + j) % N`` (owners exactly cyclic), local pages count up per rank, the reserved logical
pages ``[0, N)`` are never handed out. A request's pages from ``prefix // P`` on are its own
(a page that holds any of its current tokens, including the history part of a partial page left
by its previous chunk).

``SHAPES`` is the fixed table of the brief; ``tests/test_shared_kv_*`` are parametrised over
``SHAPES`` so further SGLang-shaped scenarios plug in by adding entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

P = 64  # SGLang's DSA page size (its DSA pool asserts it)


@dataclass(frozen=True)
class Req:
    """One request: ``chain`` (None = a cache miss), history ``prefix`` and ``extend`` tokens."""

    chain: str | None
    prefix: int
    extend: int


@dataclass
class Batch:
    """A batch placed on an ``N``-rank pool.

    Attributes:
        pages: per request, its logical page of every position-page ``j < ceil(seq / P)``.
        prefix, extend: per request.
        writers: per request, the pages it writes (``j >= prefix // P``).
    """

    name: str
    shard_size: int
    pages: list[list[int]]
    prefix: list[int]
    extend: list[int]
    local_pages: int = 0
    writers: list[set[int]] = field(default_factory=list)

    @property
    def seq(self) -> list[int]:
        return [p + e for p, e in zip(self.prefix, self.extend, strict=True)]

    @property
    def num_tokens(self) -> int:
        return sum(self.extend)

    def req_to_token(self, width: int | None = None) -> torch.Tensor:
        """(B, width) int32 rows as SGLang's ``req_to_token`` holds them (zeros past seq)."""
        width = width or max(len(p) for p in self.pages) * P
        out = torch.zeros(len(self.pages), width, dtype=torch.int32)
        for b, pages in enumerate(self.pages):
            for j, page in enumerate(pages):
                out[b, j * P : (j + 1) * P] = torch.arange(page * P, (page + 1) * P)
            out[b, self.seq[b] :] = 0
        return out

    def out_cache_loc(self) -> torch.Tensor:
        """(T,) int64 current-token locations, request-major."""
        locs = [
            self.pages[b][i // P] * P + i % P
            for b in range(len(self.pages))
            for i in range(self.prefix[b], self.seq[b])
        ]
        return torch.tensor(locs, dtype=torch.int64)


class _Allocator:
    """SGLang's rotated owner-classed page allocation, reduced to what the tests need."""

    def __init__(self, shard_size: int) -> None:
        self.n = shard_size
        self.next_local = [1] * shard_size  # local page 0 is reserved on every rank
        self.chains: dict[str, list[int]] = {}
        self.bases: dict[str, int] = {}

    def page(self, owner: int) -> int:
        local = self.next_local[owner]
        self.next_local[owner] += 1
        return local * self.n + owner

    def chain(self, name: str, num_pages: int) -> list[int]:
        pages = self.chains.setdefault(name, [])
        base = self.bases.setdefault(name, len(self.bases) % self.n)
        while len(pages) < num_pages:
            pages.append(self.page((base + len(pages)) % self.n))
        return pages


def place(name: str, reqs: list[Req], shard_size: int) -> Batch:
    """Give every request of ``reqs`` its pages on an ``shard_size``-rank pool."""
    alloc = _Allocator(shard_size)
    pages, writers = [], []
    for i, r in enumerate(reqs):
        chain = r.chain if r.chain is not None else f"miss{i}"
        n_shared = r.prefix // P
        shared = alloc.chain(chain, n_shared)[:n_shared]
        base = alloc.bases[chain]
        total = -(-(r.prefix + r.extend) // P)
        own = [alloc.page((base + j) % shard_size) for j in range(n_shared, total)]
        pages.append(shared + own)
        writers.append(set(own))
    return Batch(
        name,
        shard_size,
        pages,
        [r.prefix for r in reqs],
        [r.extend for r in reqs],
        local_pages=max(alloc.next_local),
        writers=writers,
    )


SHAPES: dict[str, list[Req]] = {
    "radix_hits_page_aligned": [Req("A", 2 * P, 10), Req("A", 2 * P, 70), Req("A", P, 5)],
    # request 0 continues its own chunk (history = its earlier pages); request 1 hits them
    "chunked_continuation_hit": [Req("A", 2 * P, 100), Req("A", 2 * P, 3), Req("A", P, 1)],
    "full_hit_extend_below_cp": [Req("A", 3 * P, 1), Req("A", 3 * P, 1), Req("A", 2 * P, 2)],
    "two_prefix_chains": [Req("A", 2 * P, 9), Req("B", P, 20), Req("A", P, 64), Req("B", 2 * P, 1)],
    "prefix_lengths": [Req("A", n, 7) for n in (P - 1, P, P + 1, 2 * P - 1, 2 * P + 1)],
    "suffix_lengths": [Req("A", P, n) for n in (P - 1, P, P + 1, 2 * P - 1, 2 * P + 1)],
    "fresh_1_6": [Req(None, 0, 1), Req(None, 0, 6)],
    "fresh_1_1_300": [Req(None, 0, 1), Req(None, 0, 1), Req(None, 0, 300)],
    "cache_miss_mixed": [Req("A", 2 * P, 5), Req(None, 0, 40), Req("A", 2 * P + 3, 2)],
    "single_request": [Req("A", 3 * P, 50)],
}


def forced_foreign_page(shard_size: int) -> Batch:
    """Request 0 writes page X while request 1 reads X as history (an allocator bug: X was
    handed out again while request 1's radix hit still held it). Both prefixes page-aligned.
    The one batch here where a page has two slots (request 0's private one, request 1's
    gathered one): what a value-keyed map (one slot per page) gets wrong."""
    base = place("forced_foreign_page", [Req("A", 3 * P, 4), Req("A", 3 * P, 5)], shard_size)
    x = base.pages[1][2]  # request 1's third history page
    pages = [[*base.pages[0][:2], x], base.pages[1]]
    return Batch("forced_foreign_page", shard_size, pages, [2 * P, 3 * P], [40, 5],
                 local_pages=base.local_pages, writers=[{x}, set(base.pages[1][3:])])  # fmt: skip


def history_value(loc: torch.Tensor, dim: int) -> torch.Tensor:
    """(N, dim) float32 pool content at logical ``loc`` (what a full replica holds)."""
    return loc.float().unsqueeze(1) * 4 + torch.arange(dim).float() / 1024


def current_value(req: torch.Tensor, pos: torch.Tensor, dim: int) -> torch.Tensor:
    """(N, dim) float32 current KV of request ``req`` at position ``pos`` (never a pool value)."""
    return (
        -(req.float().unsqueeze(1) * 100000 + pos.float().unsqueeze(1) + 1)
        - torch.arange(dim).float() / 1024
    )


def reference(batch: Batch, b: int, dim: int) -> torch.Tensor:
    """(seq_b, dim) what request ``b`` must read: pool rows for history, its own current KV."""
    pos = torch.arange(batch.seq[b])
    loc = torch.tensor([batch.pages[b][i // P] * P + i % P for i in range(batch.seq[b])])
    hist = history_value(loc, dim)
    cur = current_value(torch.full_like(pos, b), pos, dim)
    return torch.where((pos < batch.prefix[b]).unsqueeze(1), hist, cur)


def current_rows(batch: Batch, dim: int) -> torch.Tensor:
    """(T, dim) the batch's current KV, request-major."""
    req = torch.repeat_interleave(torch.arange(len(batch.pages)), torch.tensor(batch.extend))
    pos = torch.cat([torch.arange(p, s) for p, s in zip(batch.prefix, batch.seq, strict=True)])
    return current_value(req, pos, dim)
