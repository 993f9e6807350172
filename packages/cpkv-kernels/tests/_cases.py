"""Batches for the kernel tests: named adversarial groups and random batches with page sharing.

Every batch is planned by ``cpkv_runtime.plan_layout`` (the definition), so the kernels see the
slot tables, inverses and locations real callers pass.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import cpkv_runtime as cr
import torch

# Row formats of DSA: fp8 MLA row with scales (656 B), bf16 latent (1152 B), indexer K (132 B);
# then odd widths that force 2- and 1-byte words.
ROWS = {
    "656B": ((656,), torch.uint8),
    "1152B": ((576,), torch.bfloat16),
    "132B": ((132,), torch.uint8),
    "6B": ((3,), torch.int16),
    "7B": ((7,), torch.uint8),
}


@dataclass(frozen=True)
class Batch:
    name: str
    req_pages: list[list[int]]
    prefix: list[int]
    extend: list[int]
    page_size: int
    num_pages: int

    def plan(self, device: str) -> cr.Layout:
        return cr.plan_layout(
            torch.tensor(self.req_pages, dtype=torch.int32, device=device).view(
                len(self.prefix), -1
            ),
            torch.tensor(self.prefix, device=device),
            torch.tensor(self.extend, device=device),
            self.page_size,
            self.num_pages,
        )


def _pad(rows: list[list[int]], extra: int = 1) -> list[list[int]]:
    width = max((len(r) for r in rows), default=0) + extra  # always some -1 padding columns
    return [r + [-1] * (width - len(r)) for r in rows]


def random_batch(
    rng: random.Random, bsz: int, page_size: int, share: float, max_seq: int, name: str = "random"
) -> Batch:
    """``bsz`` requests; each takes its first ``share`` fraction of history pages from one common
    prefix (a radix hit), the rest fresh. Some requests have no current tokens, some start empty."""
    lens = []
    for _ in range(bsz):
        prefix = rng.randint(0, max_seq)
        extend = rng.choice([0, 1, 2, rng.randint(1, max_seq)])
        lens.append((prefix, extend))
    longest = max(math.ceil((p + e) / page_size) for p, e in lens)
    num_pages = longest * (bsz + 1) + 3
    pages = list(range(num_pages))
    rng.shuffle(pages)
    common, fresh = pages[:longest], iter(pages[longest:])
    req_pages = []
    for prefix, extend in lens:
        n = math.ceil((prefix + extend) / page_size)
        hist_full = prefix // page_size  # pages all history; a partial last one may be shared too
        shared = round(share * (hist_full + (prefix % page_size > 0)))
        req_pages.append([common[j] if j < shared else next(fresh) for j in range(n)])
    return Batch(
        name, _pad(req_pages), [p for p, _ in lens], [e for _, e in lens], page_size, num_pages
    )


def _batch(name: str, page_size: int, specs: list[tuple[list[int], int, int]]) -> Batch:
    """Requests ``(fixed pages, prefix, extend)``; pages past the fixed ones are fresh (>= 100)."""
    fresh, rows = 100, []
    for fixed, prefix, extend in specs:
        n = math.ceil((prefix + extend) / page_size)
        row = fixed[:n]
        while len(row) < n:
            row.append(fresh)
            fresh += 1
        rows.append(row)
    return Batch(
        name, _pad(rows), [s[1] for s in specs], [s[2] for s in specs], page_size, fresh + 2
    )


def named_batches(page_size: int) -> list[Batch]:
    """The adversarial groups, scaled to ``page_size``."""
    p, half = page_size, max(page_size // 2, 1)
    return [
        # Four requests on one 3-page prefix: shared read-only slots, private written ones.
        _batch("shared_prefix_pages", p, [([5, 6, 7], 3 * p, e) for e in (1, p, 2, half)]),
        # Request 0's prefix ends inside page 6, which it writes; request 1 only reads page 6.
        _batch("shared_written_page", p, [([5, 6], p + p // 2, half), ([5, 6], 2 * p, 3)]),
        # Wide -1 padding in req_pages (and -1 rows in out_cache_loc, see make_data).
        Batch("minus_one_padding", _pad([[1], [2, 3]], extra=4), [0, p], [1, 1], p, 6),
        # Prefix only (no current tokens), an empty request, a request with one token.
        _batch("empty_request", p, [([4, 2], 2 * p, 0), ([], 0, 0), ([7], 0, 1)]),
        # Prefix ending exactly on a page boundary; an extend ending exactly on one; a
        # 1-token extend opening a new page.
        _batch("page_boundary", p, [([0], p, 2 * p), ([3], 0, 2 * p), ([5], p, 1)]),
        # No current tokens at all (T = 0 apart from padding rows).
        _batch("no_current_tokens", p, [([1, 2], 2 * p, 0), ([1], p, 0)]),
    ]


@dataclass
class Data:
    """A planned batch with pool, current KV and remap queries."""

    layout: cr.Layout
    kv_pool: torch.Tensor
    current_kv: torch.Tensor
    token_req: torch.Tensor
    out_cache_loc: torch.Tensor
    locs: torch.Tensor
    req_id: torch.Tensor


def random_rows(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """Random bits of any dtype (NaN patterns included: comparisons are bytewise)."""
    es = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * es), dtype=torch.uint8, device=device)
    return raw.view(dtype)


def make_data(batch: Batch, row: str, device: str, *, topk: int = 8, pad_tokens: int = 2) -> Data:
    """Pool and current rows of format ``row``, current tokens with ``pad_tokens`` -1 rows (CP
    padding) appended, and top-k queries per token mixing the request's pages, -1 and pages the
    request does not use."""
    shape, dtype = ROWS[row]
    layout = batch.plan(device)
    p = layout.page_size
    kv_pool = random_rows((layout.num_pages, p, *shape), dtype, device)
    token_req, _, loc = cr.current_tokens(layout)
    token_req = torch.cat([token_req, torch.zeros(pad_tokens, dtype=torch.int32, device=device)])
    loc = torch.cat([loc, torch.full((pad_tokens,), -1, dtype=torch.int32, device=device)])
    current_kv = random_rows((token_req.shape[0], *shape), dtype, device)
    n = max(token_req.shape[0], 1)
    req_id = torch.randint(0, layout.batch_size, (n,), dtype=torch.int32, device=device)
    span = layout.num_pages * p
    locs = torch.randint(0, span, (n, topk), dtype=torch.int32, device=device)
    own = layout.req_pages.long()[req_id.long()]  # (n, M) the row's request's pages
    j = torch.randint(0, max(layout.max_pages, 1), (n, topk), device=device)
    page = own.gather(1, j) if layout.max_pages else torch.full_like(locs, -1).long()
    mine = page * p + torch.randint(0, p, (n, topk), device=device)
    pick = torch.rand(n, topk, device=device)
    locs = torch.where((pick < 0.7) & (page >= 0), mine.int(), locs)
    locs = torch.where(pick > 0.9, -1, locs)
    return Data(layout, kv_pool, current_kv, token_req, loc, locs, req_id)
