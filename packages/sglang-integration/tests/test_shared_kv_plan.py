"""The shared-KV scratch plan, simulated over N ranks in one process.

Every rank plans the batch, packs the pages it owns exactly as the pool does (``send_pages``
from its local stripe), the all-gather is a concatenation, the current KV is staged at the
planned rows, and then every request reads through the translated page table: position by
position it must get what a full-replica pool holds (history) or its own current KV. The
requests whose rows a rank's tables hold come from SGLang's own interleave split
(``_skv_sglang_rows``, the only SGLang code run here). The sharded pool's real code path under
``torch.distributed`` is ``test_shared_kv_distributed.py``.
"""

from __future__ import annotations

import gc
import weakref

import _sglang_env
import pytest
import torch
from _skv_sglang_rows import sglang_table_rows
from _skv_shapes import (
    SHAPES,
    Batch,
    P,
    Req,
    current_rows,
    forced_foreign_page,
    history_value,
    place,
    reference,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.shared_kv import (
    ScratchCapacityError,
    ScratchGeometry,
    TranslationError,
    current_locs,
    interleave_kept_rows,
    plan_forward,
)

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS
DIM = 6


def _geometry(batch: Batch, rank: int, gather: int | None = None) -> ScratchGeometry:
    n = batch.shard_size
    history = sum(-(-p // P) for p in batch.prefix)
    gather = n * history if gather is None else gather
    return ScratchGeometry(P, n, rank, gather, sum(len(w) for w in batch.writers))


def _kept(batch: Batch, rank: int) -> list[int] | None:
    """What the pool passes as ``kept_rows`` (``CpkvSharedKVPool.begin_cpkv_extend``): the
    split's rows when the batch has >= cp tokens (``can_dsa_prefill_cp_interleave``)."""
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
        # the requests of the rows of SGLang's tables on this rank (its bs_idx, or all)
        rows = sglang_table_rows(batch.extend, batch.shard_size, rank)
        assert plan.table_req.tolist() == rows, (batch.name, rank)
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


def _value_keyed(plans) -> None:
    """Plant the legacy map in every plan: one slot per page, the last request listing the page
    wins (the rows of ``placement.inverse`` collapsed, as SGLang's ``_page_pos``)."""
    for plan in plans:
        inverse = plan.placement.inverse
        for page in range(inverse.shape[1]):
            users = (inverse[:, page] >= 0).nonzero().flatten()
            if users.numel():
                inverse[users, page] = inverse[users[-1], page]


@pytest.mark.parametrize("cp", [2, 4])
def test_a_value_keyed_inverse_fails_the_reads(cp):
    """Negative control of ``_check_reads``: the page request 0 writes and request 1 reads as
    history has two slots; with one slot per page one of them reads the other's rows."""
    batch = forced_foreign_page(cp)
    plans, scratches, r2t = simulate(batch)
    _check_reads(batch, plans, scratches, r2t)  # the per-request inverse: right
    _value_keyed(plans)
    with pytest.raises(AssertionError, match=r"'forced_foreign_page', 0, 0\)"):
        _check_reads(batch, plans, scratches, r2t)  # rank 0: request 0 reads request 1's slot


def _address_keyed(self, kind, src):
    """Planted bug: the lookup cache keyed by a table's address and shape alone."""
    key = (kind, src.data_ptr(), tuple(src.shape), src.stride())
    hit = self._cache.get(key)
    return key, (hit[1] if hit is not None else None)


def _rewritten_table_lookups(plan, table: torch.Tensor, other: torch.Tensor):
    """Translate ``table`` and its page table, write ``other``'s values into both in place,
    translate them again: [(what the plan returns for the rewritten tensor, what a fresh tensor
    of the same values gets)] for the token table and for the page table."""
    pages, other_pages = table[:, ::P] // P, other[:, ::P] // P
    plan.translate(table)
    plan.scratch_pages(pages)
    table.copy_(other)
    pages.copy_(other_pages)
    return [
        (plan.translate(table), plan.translate(other.clone())),
        (plan.scratch_pages(pages), plan.scratch_pages(other_pages.clone())),
    ]


def test_a_table_rewritten_in_place_is_translated_again(monkeypatch):
    """The per-forward lookup cache must not answer for a table whose contents changed at the
    same address (an in-place write, or a freed table's address handed to another): the key
    carries the version counter and each entry keeps its table alive."""
    batch = place("two", SHAPES["two_prefix_chains"], 2)
    plans, _, r2t = simulate(batch)
    plan, width = plans[0], max(batch.seq)
    rows = sglang_table_rows(batch.extend, batch.shard_size, 0)
    other = r2t[rows, :width].flip(0).contiguous()  # the same locations, other requests' rows
    lookups = _rewritten_table_lookups(plan, r2t[rows, :width].clone(), other)
    assert all(torch.equal(got, fresh) for got, fresh in lookups)

    plans, _, _ = simulate(batch)  # mutation: an address-only key returns the stale rows
    monkeypatch.setattr(type(plans[0]), "_cached", _address_keyed)
    lookups = _rewritten_table_lookups(plans[0], r2t[rows, :width].clone(), other)
    assert not any(torch.equal(got, fresh) for got, fresh in lookups)


def test_a_cached_table_stays_alive_for_the_forward():
    """Why an address can key the cache: while the forward's plan lives, no table it translated
    is freed, so no other tensor can be allocated at its address."""
    batch = place("two", SHAPES["two_prefix_chains"], 2)
    plans, _, r2t = simulate(batch)
    rows = sglang_table_rows(batch.extend, batch.shard_size, 0)
    table = r2t[rows, : max(batch.seq)].clone()
    plans[0].translate(table)
    alive = weakref.ref(table)
    del table
    gc.collect()
    assert alive() is not None


def test_lookups_under_inference_mode():
    """SGLang's forward may run under ``torch.inference_mode`` (its inference-mode switch):
    tensors made there keep no version counter, and the cached lookups still answer."""
    batch = place("two", SHAPES["two_prefix_chains"], 2)
    plans, scratches, r2t = simulate(batch)
    want = [plan.translate(r2t[sglang_table_rows(batch.extend, 2, r)]) for r, plan in
            enumerate(plans)]  # fmt: skip
    plans, scratches, r2t = simulate(batch)
    with torch.inference_mode():
        r2t = r2t.clone()
        assert r2t.is_inference()
        _check_reads(batch, plans, scratches, r2t)
        for rank, plan in enumerate(plans):
            table = r2t[sglang_table_rows(batch.extend, 2, rank)]
            assert torch.equal(plan.translate(table), want[rank])
            assert plan.translate(table) is plan.translate(table)  # a hit, not a recompute


@pytest.mark.parametrize("name", ["chunked_continuation_hit", "prefix_lengths"])
def test_value_keying_changes_nothing_without_a_page_of_two_slots(name):
    """Why the control above needs the foreign page: on these shapes no page has two slots
    (read-only pages share one, written pages are their writer's alone), so the collapse is the
    identity and the reads stay right; the value-keyed bug needs a page shared by a writer."""
    batch = place(name, SHAPES[name], 2)
    plans, scratches, r2t = simulate(batch)
    before = [plan.placement.inverse.clone() for plan in plans]
    _value_keyed(plans)
    assert all(torch.equal(p.placement.inverse, b) for p, b in zip(plans, before, strict=True))
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


def test_row_requests_come_from_the_split_not_the_row_count():
    """Rank 1 of [1, 6] at cp 2 keeps request 1 only: its tables have one row, request 1's. A
    table of all requests (two rows) is refused, and so is a one-row table on a rank that keeps
    both: the request of a row is never guessed from how many rows a table has."""
    batch = place("fresh", SHAPES["fresh_1_6"], 2)
    plans, _, r2t = simulate(batch)
    assert plans[0].table_req.tolist() == [0, 1] and plans[1].table_req.tolist() == [1]
    with pytest.raises(TranslationError, match=r"has 2 rows.*\(1 of 2\)"):
        plans[1].translate(r2t[:, :64])
    with pytest.raises(TranslationError, match=r"has 1 rows.*\(2 of 2\)"):
        plans[0].translate(r2t[[1], :64])
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


def _check_current_locs(batch: Batch, seed: int, locs=current_locs) -> None:
    """``locs(req_to_token, req_pool_indices, prefix_lens, seq_lens)`` is the batch's
    ``out_cache_loc`` (``Batch.out_cache_loc``: from its pages, in plain Python). The batch's rows
    sit at shuffled rows of a larger ``req_to_token``, junk in the others, as SGLang's
    ``req_to_token_pool`` holds them."""
    gen = torch.Generator().manual_seed(seed)
    rows = batch.req_to_token()
    shape = (rows.shape[0] + 3, rows.shape[1])
    r2t = torch.randint(0, 1 << 30, shape, generator=gen, dtype=torch.int32)
    where = torch.randperm(shape[0], generator=gen)[: rows.shape[0]]  # req_pool_indices
    r2t[where] = rows
    got = locs(r2t, where, batch.prefix, batch.seq)
    assert got.dtype == r2t.dtype
    assert torch.equal(got.long(), batch.out_cache_loc()), batch.name


@pytest.mark.parametrize("name", list(SHAPES))
def test_current_locs_are_the_batchs_out_cache_loc(name):
    _check_current_locs(place(name, SHAPES[name], 2), seed=len(name))


@settings(max_examples=40, deadline=None)
@given(batch=_batches(), seed=st.integers(0, 1 << 30))
def test_random_current_locs(batch, seed):
    _check_current_locs(batch, seed)


def test_a_batch_of_many_lengths():
    """150 requests, 300 lengths: past the 240 host numbers the CUDA paths upload from pinned
    memory (``upload_ints``, the plan's first kernel); on CPU this covers the size only."""
    reqs = [Req("A" if i % 2 else None, (i % 3) * P + i % 5, 1 + i % 7) for i in range(150)]
    batch = place("many", reqs, 2)
    _check_current_locs(batch, seed=1)
    plans, scratches, r2t = simulate(batch)
    _check_reads(batch, plans, scratches, r2t)


@pytest.mark.parametrize("name", ["radix_hits_page_aligned", "single_request"])
def test_reversed_current_locs_fail_the_check(name):
    """Negative control: ``current_locs`` with its output reversed (the audit's mutation, which
    the meta sync tests let through) fails ``_check_current_locs``."""
    batch = place(name, SHAPES[name], 2)
    with pytest.raises(AssertionError):
        _check_current_locs(batch, 0, lambda *args: current_locs(*args).flip(0))


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
