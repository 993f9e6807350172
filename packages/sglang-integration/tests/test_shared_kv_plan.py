"""The shared-KV scratch plan, simulated over N ranks in one process (no SGLang import).

Every rank plans the batch, packs the pages it owns exactly as the pool does (``send_pages``
from its local stripe), the all-gather is a concatenation, the current KV is staged at the
planned rows, and then every request reads through the translated page table: position by
position it must get what a full-replica pool holds (history) or its own current KV. The
sharded pool's real code path under ``torch.distributed`` is ``test_shared_kv_distributed.py``.
"""

from __future__ import annotations

import pytest
import torch
from _skv_shapes import SHAPES, Batch, P, Req, current_rows, history_value, place, reference
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.shared_kv import (
    ScratchCapacityError,
    ScratchGeometry,
    TranslationError,
    interleave_kept_rows,
    plan_forward,
)

DIM = 6


def _geometry(batch: Batch, rank: int, gather: int | None = None) -> ScratchGeometry:
    n = batch.shard_size
    history = sum(-(-p // P) for p in batch.prefix)
    gather = n * history if gather is None else gather
    return ScratchGeometry(P, n, rank, gather, sum(len(w) for w in batch.writers))


def _kept(batch: Batch, rank: int) -> list[int] | None:
    # SGLang splits a batch over CP ranks only when it has >= cp tokens (can_dsa_prefill_cp_...)
    if batch.num_tokens < batch.shard_size:
        return None
    return interleave_kept_rows(batch.extend, batch.shard_size, rank)


def simulate(batch: Batch, geometries: list[ScratchGeometry] | None = None):
    """Each rank's plan and the scratch it assembles (gather + staged current KV)."""
    n = batch.shard_size
    num_pages = n * (batch.local_pages + 1)
    full_pool = history_value(torch.arange(num_pages * P), DIM).view(num_pages, P, DIM)
    geos = geometries or [_geometry(batch, r) for r in range(n)]
    r2t = batch.req_to_token()
    idx = torch.arange(len(batch.pages))
    plans = [
        plan_forward(
            r2t,
            idx,
            batch.prefix,
            batch.seq,
            batch.out_cache_loc(),
            geos[r],
            num_pages,
            kept_rows=_kept(batch, r),
        )
        for r in range(n)
    ]
    scratches = []
    for r in range(n):
        geo = geos[r]
        scratch = torch.full(((geo.trash_page + 1), P, DIM), float("nan"))
        for q in range(n):  # rank q's send block: its local pages, i.e. logical local * N + q
            block = plans[q].placement.block
            logical = plans[q].placement.send_pages * n + q
            scratch[q * block : (q + 1) * block] = full_pool[logical]
        scratch.view(-1, DIM)[plans[r].cur_rows] = current_rows(batch, DIM)
        scratches.append(scratch.view(-1, DIM))
    return plans, scratches, r2t


def _check_reads(batch: Batch, plans, scratches, r2t) -> None:
    width = max(batch.seq)
    for rank, (plan, scratch) in enumerate(zip(plans, scratches, strict=True)):
        kept = _kept(batch, rank)
        for rows in [list(range(len(batch.pages)))] + ([kept] if kept is not None else []):
            table = r2t[rows, :width]
            got = scratch[plan.translate(table)]
            pages = plan.scratch_pages(table[:, ::P] // P)
            for i, b in enumerate(rows):
                seq = batch.seq[b]
                want = reference(batch, b, DIM)
                assert torch.equal(got[i, :seq], want), (batch.name, rank, b)
                # the indexer's page lookups agree with the token lookups, page by page
                n_pages = -(-seq // P)
                tok = plan.translate(table)[i, : n_pages * P : P]
                assert torch.equal(pages[i, :n_pages] * P, tok), (batch.name, rank, b)


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("name", list(SHAPES))
def test_every_request_reads_what_a_full_replica_holds(name, cp):
    batch = place(name, SHAPES[name], cp)
    plans, scratches, r2t = simulate(batch)
    _check_reads(batch, plans, scratches, r2t)
    first = plans[0].placement
    for plan in plans[1:]:  # the plan is mirrored: only the send block differs per rank
        assert torch.equal(plan.placement.slot_scratch, first.slot_scratch)
        assert plan.placement.block == first.block


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("name", list(SHAPES))
def test_slots_and_regions(name, cp):
    """History slots fill the gather blocks, fresh written pages the write region, no overlap;
    a page two requests read is gathered once (dedup); a written page is private."""
    batch = place(name, SHAPES[name], cp)
    plans, _, _ = simulate(batch)
    placement = plans[0].placement
    layout, geo = placement.layout, _geometry(batch, 0)
    pages = placement.slot_scratch[: layout.num_slots]
    assert pages.unique().numel() == pages.numel()
    gathered = pages < geo.write_base
    assert int(gathered.sum()) == placement.num_gathered
    assert bool((pages[~gathered] < geo.trash_page).all())
    assert bool((pages[gathered] < cp * placement.block).all())
    # owner of a gathered slot's page is the rank whose block it sits in
    owner = layout.slot_page.long()[gathered] % cp
    assert torch.equal(torch.div(pages[gathered], placement.block, rounding_mode="floor"), owner)
    read_only = layout.slot_owner < 0
    shared = layout.slot_page[read_only]
    assert shared.unique().numel() == shared.numel()  # one slot per read-only page


def test_shared_prefix_is_gathered_once():
    """8 requests on one 16-page prefix: 16 gathered slots (not 128), block = 16 / cp."""
    batch = place("dedup", [Req("A", 16 * P, 40) for _ in range(8)], 4)
    plans, scratches, r2t = simulate(batch)
    assert plans[0].placement.num_gathered == 16
    assert plans[0].placement.block == 4
    _check_reads(batch, plans, scratches, r2t)


def test_batch_larger_than_the_scratch_is_refused_before_any_layer():
    batch = place("big", [Req("A", 4 * P, 3), Req("B", 4 * P, 3)], 2)
    geo = [_geometry(batch, r, gather=2 * 3) for r in range(2)]  # needs 2 x 4 gather pages
    with pytest.raises(ScratchCapacityError, match=r"needs 2 x 4 gather pages .* holds 6"):
        simulate(batch, geo)


def test_tables_without_a_request_per_row_are_refused():
    batch = place("two", SHAPES["two_prefix_chains"], 2)
    plans, _, r2t = simulate(batch)
    with pytest.raises(TranslationError, match="has 5 rows"):
        plans[0].translate(r2t[[0, 1, 2, 3, 0], :64])
    with pytest.raises(TranslationError, match="not this forward's out_cache_loc"):
        plans[0].translate(batch.out_cache_loc().clone())


@st.composite
def _batches(draw):
    cp = draw(st.sampled_from([2, 3, 4]))
    reqs = [
        Req(
            draw(st.sampled_from([None, "A", "B"])),
            draw(st.integers(0, 3 * P + 2)),
            draw(st.integers(1, 2 * P + 3)),
        )
        for _ in range(draw(st.integers(1, 5)))
    ]
    return place("random", reqs, cp)


@settings(max_examples=40, deadline=None)
@given(batch=_batches())
def test_random_batches_read_full_replica_rows(batch):
    plans, scratches, r2t = simulate(batch)
    _check_reads(batch, plans, scratches, r2t)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("prefix_lengths", True), ("cache_miss_mixed", True), ("radix_hits_page_aligned", False),
     ("fresh_1_1_300", False), ("chunked_continuation_hit", False)],
)  # fmt: skip
def test_stores_wait_for_the_gather_only_when_a_slot_is_both(name, expected):
    """A prefix ending mid-page puts its request's private page in the gather region: the
    layer's stores must then wait for the layer's gather (the pool orders them on the stream)."""
    batch = place(name, SHAPES[name], 2)
    plans, _, _ = simulate(batch)
    assert plans[0].stage_after_gather is expected
    placement = plans[0].placement
    written_gathered = (placement.layout.slot_owner >= 0) & (
        placement.slot_scratch[: placement.layout.num_slots] < 2 * placement.block
    )
    assert bool(written_gathered.any()) is expected
