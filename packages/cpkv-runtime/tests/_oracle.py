"""Plain-Python oracle for every cpkv_runtime op: lists, dicts and loops, obviously correct.

Slow on purpose; the property tests compare the vectorised ops against it on small batches.
Rows are tensors here only to hold bytes; no index arithmetic is done in torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def is_written(prefix: int, extend: int, page_size: int, j: int) -> bool:
    """Does page index j of a request hold any of its current tokens [prefix, prefix+extend)?"""
    return any(prefix <= i < prefix + extend for i in range(j * page_size, (j + 1) * page_size))


def pages_used(prefix: int, extend: int, page_size: int) -> int:
    n = 0
    while n * page_size < prefix + extend:
        n += 1
    return n


@dataclass
class OracleLayout:
    page_size: int
    num_pages: int
    slot_table: list[list[int]]
    slot_page: list[int] = field(default_factory=list)
    slot_owner: list[int] = field(default_factory=list)
    inverse: list[dict[int, int]] = field(default_factory=list)  # per request: page -> slot
    seq_lens: list[int] = field(default_factory=list)

    def inverse_dense(self) -> list[list[int]]:
        """The (B, num_pages) inverse as nested lists, -1 where absent."""
        return [[inv.get(p, -1) for p in range(self.num_pages)] for inv in self.inverse]


def plan(
    req_pages: list[list[int]],
    prefix: list[int],
    extend: list[int],
    page_size: int,
    num_pages: int,
    dedup: bool = True,
    written=None,
) -> OracleLayout:
    """Row-major scan; new slot unless read-only and an earlier read-only pair had the page.

    ``written(b, j) -> bool`` overrides the request-keyed rule (used to model the legacy mask).
    """
    if written is None:

        def written(b: int, j: int) -> bool:
            return is_written(prefix[b], extend[b], page_size, j)

    width = len(req_pages[0]) if req_pages else 0
    out = OracleLayout(page_size, num_pages, [[-1] * width for _ in req_pages])
    shared: dict[int, int] = {}
    for b, row in enumerate(req_pages):
        out.inverse.append({})
        out.seq_lens.append(prefix[b] + extend[b])
        for j in range(pages_used(prefix[b], extend[b], page_size)):
            page, w = row[j], written(b, j)
            if not w and dedup and page in shared:
                slot = shared[page]
            else:
                slot = len(out.slot_page)
                out.slot_page.append(page)
                out.slot_owner.append(b if w else -1)
                if not w and dedup:
                    shared[page] = slot
            out.slot_table[b][j] = slot
            out.inverse[b][page] = slot
    return out


def materialize(kv_pool: torch.Tensor, lay: OracleLayout) -> list[list[torch.Tensor]]:
    """dense[s][o] = pool row (slot_page[s], o), as a list of lists of row tensors."""
    return [[kv_pool[p][o].clone() for o in range(lay.page_size)] for p in lay.slot_page]


def fill_current(dense, current_kv, token_req, out_cache_loc, lay: OracleLayout) -> None:
    for t, loc in enumerate(out_cache_loc):
        if loc == -1:
            continue
        slot = lay.inverse[token_req[t]][loc // lay.page_size]
        dense[slot][loc % lay.page_size] = current_kv[t].clone()


def stack(dense: list[list[torch.Tensor]], kv_pool: torch.Tensor) -> torch.Tensor:
    """The oracle's dense lists as a (S, P, *row) tensor of the pool's dtype."""
    if not dense:
        return torch.empty((0, *kv_pool.shape[1:]), dtype=kv_pool.dtype)
    return torch.stack([torch.stack(page) for page in dense])


def remap_locs(locs: list, req_id: list[int], lay: OracleLayout) -> list:
    def one(b: int, loc: int) -> int:
        if loc == -1 or b == -1:
            return -1
        slot = lay.inverse[b].get(loc // lay.page_size)
        return -1 if slot is None else slot * lay.page_size + loc % lay.page_size

    return [
        [one(req_id[n], v) for v in row] if isinstance(row, list) else one(req_id[n], row)
        for n, row in enumerate(locs)
    ]


def remap_positions(positions: list, req_id: list[int], lay: OracleLayout) -> list:
    def one(b: int, pos: int) -> int:
        if pos < 0 or b < 0 or pos >= lay.seq_lens[b]:
            return -1
        return lay.slot_table[b][pos // lay.page_size] * lay.page_size + pos % lay.page_size

    return [
        [one(req_id[n], v) for v in row] if isinstance(row, list) else one(req_id[n], row)
        for n, row in enumerate(positions)
    ]


def current_page_mask(req_pages, prefix, extend, page_size) -> list[list[bool]]:
    return [
        [
            j < pages_used(prefix[b], extend[b], page_size)
            and is_written(prefix[b], extend[b], page_size, j)
            for j in range(len(row))
        ]
        for b, row in enumerate(req_pages)
    ]


def current_tokens(req_pages, prefix, extend, page_size):
    """(token_req, token_pos, out_cache_loc) lists, request-major."""
    reqs, poss, locs = [], [], []
    for b in range(len(req_pages)):
        for i in range(prefix[b], prefix[b] + extend[b]):
            reqs.append(b)
            poss.append(i)
            locs.append(req_pages[b][i // page_size] * page_size + i % page_size)
    return reqs, poss, locs


def truth_row(b, i, req_pages, prefix, page_size, kv_pool, current_kv, token_index):
    """What request b must read at position i (invariant 1): pool history or its own current KV."""
    if i < prefix[b]:
        return kv_pool[req_pages[b][i // page_size]][i % page_size]
    return current_kv[token_index[(b, i)]]


def cp_split(extend: list[int], cp: int, strategy: str) -> list[list[int]]:
    """Per rank, the global token index of each local row, -1 = padding.

    Written from the rule as stated (docs/design.md "CP split"), one token at a time:

    - zigzag: request b's ``e`` tokens go into ``2*cp`` blocks, block k gets ``e // (2*cp)``
      tokens plus one if ``k < e % (2*cp)``; rank r lists block r of every request, then block
      ``2*cp - 1 - r`` of every request.
    - interleave: token t belongs to rank ``t % cp``.
    - every rank pads to the longest rank's count rounded up to ``2*cp`` (zigzag) or ``cp``;
      at cp 1 nothing is split or padded.
    """
    total = sum(extend)
    if cp == 1:
        return [list(range(total))]
    if strategy == "interleave":
        ranks = [[t for t in range(total) if t % cp == r] for r in range(cp)]
        align = cp
    else:
        align = 2 * cp
        per_request = []  # per_request[b][k] = tokens of block k of request b
        start = 0
        for e in extend:
            blocks = []
            for k in range(align):
                size = e // align + (1 if k < e % align else 0)
                blocks.append(list(range(start, start + size)))
                start += size
            per_request.append(blocks)
        ranks = []
        for r in range(cp):
            prev = [t for blocks in per_request for t in blocks[r]]
            nxt = [t for blocks in per_request for t in blocks[align - 1 - r]]
            ranks.append(prev + nxt)
    longest = max(len(tokens) for tokens in ranks)
    local = -(-longest // align) * align
    return [tokens + [-1] * (local - len(tokens)) for tokens in ranks]


def shard_order(
    lay: OracleLayout, prefix: list[int], shard_size: int
) -> tuple[list[int], list[int]]:
    """(order of the used slots, ends): gathered slots (some request reads history through
    them) by owner rank ``page % N`` then slot, the others after them in slot order; ``ends[r]``
    counts the gathered slots of ranks ``0..r``."""
    p = lay.page_size
    gathered = {
        lay.slot_table[b][j]
        for b in range(len(prefix))
        for j in range(-(-prefix[b] // p))
        if lay.slot_table[b][j] >= 0
    }
    used = range(len(lay.slot_page))

    def category(s: int) -> int:
        return lay.slot_page[s] % shard_size if s in gathered else shard_size

    order = sorted(used, key=lambda s: (category(s), s))
    ends = [sum(1 for s in used if category(s) <= r) for r in range(shard_size)]
    return order, ends


def shard_scratch_page(pos: int, ends: list[int], block: int, write_base: int) -> int:
    """Where the slot at gather position ``pos`` lives: rank r's run at ``r * block``, the
    others from ``write_base``."""
    begin = 0
    for r, end in enumerate(ends):
        if pos < end:
            return r * block + pos - begin
        begin = end
    return write_base + pos - begin
