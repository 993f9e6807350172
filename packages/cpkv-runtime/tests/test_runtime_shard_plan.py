"""The sharded pool's per-forward op (``shard_plan``) of the torch backend against the
plain-Python oracle (``_oracle.py``), on hypothesis batches with heavy page sharing,
boundary lengths, empty extends, stale pages past the used ones, and a ``req_to_token`` whose
rows are shuffled and padded with junk. The CUDA kernels are held to the torch backend on the
GPU (``cpkv-kernels``' ``test_kernels_shard_plan.py``).
"""

from __future__ import annotations

import random

import _oracle as oracle
import pytest
import torch
from _strategies import batches
from cpkv_runtime import available_backends
from hypothesis import given, settings
from hypothesis import strategies as st

TORCH_OPS = available_backends()["torch"].ops


def token_table(batch, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    """(req_to_token, req_pool_indices) holding the batch's pages, as SGLang's allocator would:
    position ``j * P + o`` of request b at location ``req_pages[b][j] * P + o``; rows shuffled
    among spare rows, columns and rows past the batch full of junk."""
    p, bsz = batch.page_size, batch.batch_size
    cols = len(batch.req_pages[0]) * p + rng.randint(0, 2)
    rows = bsz + rng.randint(0, 2)
    table = [[rng.randint(-5, 10**6) for _ in range(cols)] for _ in range(rows)]
    where = rng.sample(range(rows), bsz)
    for b, row in enumerate(batch.req_pages):
        for j, page in enumerate(row):
            for o in range(p):
                table[where[b]][j * p + o] = page * p + o
    return torch.tensor(table, dtype=torch.int64), torch.tensor(where)


def current_locs(batch, rng: random.Random) -> list[int]:
    """Each request's current tokens' locations, request-major; now and then one on a page the
    request does not list, or -1 (both must land on the trash page)."""
    out = []
    for b, row in enumerate(batch.req_pages):
        for i in range(batch.prefix[b], batch.prefix[b] + batch.extend[b]):
            pick = rng.random()
            page = row[i // batch.page_size]
            if pick < 0.05:
                page = batch.num_pages + rng.randint(0, 3)
            out.append(-1 if pick > 0.97 else page * batch.page_size + i % batch.page_size)
    return out


@settings(max_examples=150, deadline=None)
@given(batch=batches(), shard_size=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_shard_plan_matches_the_oracle(batch, shard_size, seed):
    rng = random.Random(seed)
    p, bsz = batch.page_size, batch.batch_size
    r2t, where = token_table(batch, rng)
    kept = sorted(rng.sample(range(bsz), rng.randint(0, bsz)))
    used_pages = [-(-(q + e) // p) for q, e in zip(batch.prefix, batch.extend, strict=True)]
    capacity = sum(used_pages) + rng.randint(0, 3)
    lay = oracle.plan(batch.req_pages, batch.prefix, batch.extend, p, batch.num_pages)
    used = len(lay.slot_page)
    order, ends = oracle.shard_order(lay, batch.prefix, shard_size)
    owned = [e - b for b, e in zip([0, *ends[:-1]], ends, strict=True)]
    block = max(owned, default=0)
    write_base = shard_size * (block + rng.randint(0, 2))
    trash = write_base + (used - sum(owned)) + rng.randint(0, 2)
    rank = rng.randrange(shard_size)
    locs = current_locs(batch, rng)
    width = max(used_pages) + rng.randint(0, 1)
    out = TORCH_OPS["shard_plan"](
        r2t, where, torch.tensor(locs, dtype=torch.long), [*batch.prefix, *batch.extend], kept,
        width, p, batch.num_pages, capacity, shard_size, rank, write_base, trash, True,
    )  # fmt: skip
    (host, inverse, rows, kept_t, slot_scratch, send, token_req, cur_rows, local_rows, order_t,
     spos_t, ext_start, slot_page, pages) = out[:14]  # fmt: skip
    slot_table = out[18]
    want_pages = [
        [row[j] if j < used_pages[b] else -1 for j in range(width)]
        for b, row in enumerate(batch.req_pages)
    ]
    assert pages.tolist() == want_pages
    assert slot_table.tolist() == [[*r, *[-1] * (width - len(r))][:width] for r in lay.slot_table]
    assert slot_page.tolist() == lay.slot_page + [-1] * (capacity - used)
    assert inverse.tolist() == lay.inverse_dense()
    assert order_t.tolist() == order + list(range(used, capacity))
    spos = spos_t.tolist()
    assert [spos[s] for s in order_t.tolist()] == list(range(capacity))
    assert host.tolist() == [0, used, *ends, block]
    assert ext_start.tolist() == [sum(batch.extend[:b]) for b in range(bsz + 1)]
    assert rows.tolist() == list(range(bsz))
    assert kept_t.tolist() == kept

    pos = {s: i for i, s in enumerate(order)}
    scratch = [oracle.shard_scratch_page(pos[s], ends, block, write_base) for s in range(used)]
    assert slot_scratch.tolist() == scratch + [trash] * (capacity - used + 1)
    begin = ends[rank - 1] if rank else 0
    mine = [lay.slot_page[s] // shard_size for s in order[begin : ends[rank]]]
    assert send.tolist() == mine + [0] * (capacity - len(mine))
    want_req = [b for b in range(bsz) for _ in range(batch.extend[b])]
    assert token_req.tolist() == want_req
    for t, (b, loc) in enumerate(zip(want_req, locs, strict=True)):
        page, offset = loc // p, loc % p
        slot = lay.inverse[b].get(page, -1)
        row = (scratch[slot] if slot >= 0 else trash) * p + offset
        assert cur_rows[t].item() == row, (t, b, loc)
        mine_page = page >= 0 and page % shard_size == rank
        local = (page // shard_size) * p + offset if mine_page else offset
        assert local_rows[t].item() == local, (t, b, loc)


@pytest.mark.parametrize("what", ["duplicate", "outside"])
def test_bad_pages_give_the_status_and_an_identity_order(what):
    """A request listing a page twice, or a page past the pool: plan_slots' status, read with
    the counts; the order is the identity and every rank's count 0."""
    p = 4
    pages = [[0, 1, 2], [3, 4, 5]]
    pages[1][1] = 3 if what == "duplicate" else 99
    table = torch.tensor([[pg * p + o for pg in row for o in range(p)] for row in pages])
    locs = torch.arange(8, dtype=torch.long)
    out = TORCH_OPS["shard_plan"](table, torch.arange(2), locs, [8, 4, 2, 6], [], 3, p, 8, 6, 2,
                                  0, 4, 10, True)  # fmt: skip
    status = out[0].tolist()[0]
    assert status == (8 if what == "duplicate" else 4)  # plan_slots' status bits
    assert out[0].tolist()[2:] == [0, 0, 0]  # no rank counts, block 0
    assert out[9].tolist() == out[10].tolist() == list(range(6))
