"""The torch definition of ``shard_plan``: one forward's scratch plan for a page-interleaved
sharded KV pool (logical page ``l`` on rank ``l % N`` as local page ``l // N``).

A forward assembles a scratch buffer of pages per layer: the slots some request reads history
through (*gathered* slots) arrive by one all-gather in which rank ``r`` sends the gathered slots
it owns, in slot order, as a block of ``block`` pages at ``r * block``; the other slots (pages
that hold only current tokens) follow from ``write_base``; an absent lookup lands on
``trash_page``. Everything is computed on the device, ``block`` (the largest rank's run)
included, so nothing waits for the host: the batch's pages, its :func:`plan_slots` layout, the
gather order and the placement, with the numbers the host must read (status, slot count, each
rank's gathered count, ``block``) in one small tensor. Contract and shapes: ``_backend.py``. The
CUDA kernels match bitwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._torch_plan import plan_slots

__all__ = ["shard_plan"]


def _floordiv(x: torch.Tensor, d: int) -> torch.Tensor:
    return torch.div(x, d, rounding_mode="floor")


def shard_plan(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    out_cache_loc: torch.Tensor,
    lens: Sequence[int],
    kept: Sequence[int],
    width: int,
    page_size: int,
    num_pages: int,
    max_slots: int,
    shard_size: int,
    shard_rank: int,
    write_base: int,
    trash_page: int,
    with_layout: bool,
) -> list[torch.Tensor]:
    """The plan of one forward before its host read; see ``_backend.py`` for the outputs."""
    device = req_to_token.device
    bsz = len(lens) // 2
    prefix_h, extend_h = [int(x) for x in lens[:bsz]], [int(x) for x in lens[bsz:]]
    starts, run = [], 0
    for e in extend_h:
        starts.append(run)
        run += e
    staged = torch.tensor(
        [*prefix_h, *extend_h, *starts, run, *range(bsz), *(int(k) for k in kept)],
        dtype=torch.long,
    ).to(device)
    prefix, extend = staged[:bsz], staged[bsz : 2 * bsz]

    # The batch's pages: the location of each page's first position, // P.
    rows, cols = req_to_token.shape
    j = torch.arange(width, device=device)
    used = j.unsqueeze(0) < _floordiv(prefix + extend + page_size - 1, page_size).unsqueeze(1)
    row = req_pool_indices.long().unsqueeze(1)
    col = (j * page_size).unsqueeze(0)
    readable = (row >= 0) & (row < rows) & (col < cols)
    flat = torch.cat([req_to_token.reshape(-1).long(), staged.new_zeros(1)])  # + a spare cell
    first = flat[torch.where(readable, row * cols + col, rows * cols)]
    page = _floordiv(first, page_size)
    page = torch.where(readable & (page >= 0), page.clamp(max=2**31 - 1), -1)
    req_pages = torch.where(used, page, -1).int()

    plan = list(plan_slots(req_pages, prefix, extend, page_size, num_pages, max_slots, True))
    slot_table, slot_page, info = plan[5], plan[6], plan[11]
    order, spos, host = _gather_order(
        slot_table, slot_page, info, prefix, page_size, max_slots, shard_size
    )
    ext_start = staged[2 * bsz : 3 * bsz + 1].clone()
    rows, kept_t = (t.clone() for t in staged[3 * bsz + 1 :].split([bsz, len(kept)]))
    placed = _place(order, spos, host, slot_page, plan[8], ext_start, out_cache_loc, page_size,
                    shard_size, shard_rank, write_base, trash_page)  # fmt: skip
    out = [placed[0], plan[8], rows, kept_t, *placed[1:]]
    if with_layout:  # plan_slots' used_slots and status are views of its info: copies here
        out += [order, spos, ext_start, slot_page, *plan[:6], plan[7], info[0:1].clone(),
                info[1:2].clone(), info]  # fmt: skip
    return out


def _gather_order(
    slot_table: torch.Tensor,
    slot_page: torch.Tensor,
    info: torch.Tensor,
    prefix: torch.Tensor,
    page_size: int,
    max_slots: int,
    shard_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(order, spos, host): slots sorted stably by category (owner rank of a gathered slot, else
    ``N``), the inverse permutation, and ``[status, used slots, ends of the ranks' runs, block]``
    (``block`` the largest run)."""
    device, n, s = slot_table.device, shard_size, max_slots
    status, used_raw = info[1].long(), info[0].long()
    ok = (status == 0) & (used_raw <= s)
    used = torch.where(ok, used_raw, 0)
    slot_ids = torch.arange(s, device=device)
    history = torch.arange(slot_table.shape[1], device=device).unsqueeze(0) < _floordiv(
        prefix + page_size - 1, page_size
    ).unsqueeze(1)
    marked = torch.where(history & (slot_table >= 0), slot_table.long(), s).reshape(-1)
    gathered = torch.zeros(s + 1, dtype=torch.bool, device=device)
    gathered.index_fill_(0, marked, True)
    live = slot_ids < used
    category = torch.where(gathered[:s] & live, slot_page.long() % n, n)
    category = torch.where(live, category, n + 1)  # padding slots after every used one
    order = torch.sort(category, stable=True).indices
    spos = torch.empty_like(order)
    spos[order] = slot_ids
    ranks = torch.arange(n, device=device)
    ends = torch.searchsorted(torch.sort(category).values, ranks, right=True)
    block = (ends - torch.cat([ends.new_zeros(1), ends[:-1]])).max()
    host = torch.cat([torch.stack([status, used_raw]), ends, block.view(1)])
    return order.int(), spos.int(), host.int()


def _place(
    order: torch.Tensor,
    spos: torch.Tensor,
    host: torch.Tensor,
    slot_page: torch.Tensor,
    inverse: torch.Tensor,
    ext_start: torch.Tensor,
    out_cache_loc: torch.Tensor,
    page_size: int,
    shard_size: int,
    shard_rank: int,
    write_base: int,
    trash_page: int,
) -> tuple[torch.Tensor, ...]:
    """(host, slot_scratch, send_pages, token_req, cur_rows, local_rows): the placement, with
    ``block`` read from ``host`` on the device."""
    device, n, s = order.device, shard_size, order.numel()
    host = host.long()
    used = torch.where(host[0] == 0, host[1], 0)
    ends, block = host[2 : 2 + n], host[2 + n]
    begins = torch.cat([ends.new_zeros(1), ends[:-1]])

    def scratch_page(pos: torch.Tensor) -> torch.Tensor:
        run = torch.searchsorted(ends, pos, right=True)  # the rank whose run holds pos, or n
        gathered_page = run.clamp(max=n - 1) * block + pos - begins[run.clamp(max=n - 1)]
        return torch.where(run < n, gathered_page, write_base + pos - ends[-1])

    slot_ids = torch.arange(s, device=device)
    slot_scratch = torch.full((s + 1,), trash_page, dtype=torch.long, device=device)
    slot_scratch[:s] = torch.where(slot_ids < used, scratch_page(spos.long()), trash_page)

    i = torch.arange(s, device=device)
    begin, owned = begins[shard_rank], ends[shard_rank] - begins[shard_rank]
    src = order.long()[(begin + i).clamp(0, max(s - 1, 0))]
    send = torch.where(i < owned, slot_page.long()[src] // n, 0).int()

    bsz, pages = inverse.shape
    t = torch.arange(out_cache_loc.numel(), device=device)
    token_req = torch.searchsorted(ext_start[1:], t, right=True)
    loc = out_cache_loc.long()
    page = _floordiv(loc, page_size)
    offset = loc - page * page_size
    known = (token_req < bsz) & (page >= 0) & (page < pages)
    flat = token_req.clamp(max=max(bsz - 1, 0)) * pages + page.clamp(0, max(pages - 1, 0))
    slot = torch.where(known, inverse.reshape(-1)[flat].long(), -1) if bsz else -torch.ones_like(t)
    cur_rows = slot_scratch[slot] * page_size + offset
    mine = (page >= 0) & (page % n == shard_rank)
    local_rows = torch.where(mine, _floordiv(page, n) * page_size + offset, offset)
    return host.int(), slot_scratch, send, token_req, cur_rows, local_rows
