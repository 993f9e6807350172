"""The validation scenarios (docs/design.md), the adversarial groups, the legacy inverse (inv. 4).

Each scenario runs plan -> materialize -> fill_current and checks invariant 1 against the pool and
the requests' own current rows, invariant 2, the oracle, and invariant 3 (every request reads the
same rows at batch size N as alone).
"""

from __future__ import annotations

import _legacy
import _oracle
import cpkv_runtime as cr
import pytest
import torch
from _scenarios import (
    ADVERSARIAL,
    DUPLICATE_PAGE_IN_REQUEST,
    SCENARIOS,
    Batch,
    eviction_churn,
    oracle_dense,
    reads,
    run,
)


def assert_correct(batch: Batch, dedup: bool = True) -> cr.Layout:
    r = run(batch, dedup=dedup)
    cr.check_invariants(r.layout, r.kv_pool, r.dense, r.current_kv, r.token_req, r.out_cache_loc)
    _, want = oracle_dense(batch, r.kv_pool, r.current_kv, dedup)
    assert torch.equal(r.dense, want)
    assert _legacy.first_violation(reads(r), *_args(batch, r)) is None
    together = reads(r)
    for b in range(batch.batch_size):  # invariant 3: batch N == batch 1, row for row
        alone = reads(run(batch.only(b), markers=[b], dedup=dedup))
        for i in range(batch.prefix[b] + batch.extend[b]):
            assert torch.equal(together[(b, i)], alone[(0, i)]), (batch.name, b, i)
    return r.layout


def _args(batch: Batch, r):
    return batch.req_pages, batch.prefix, batch.extend, batch.page_size, r.kv_pool, r.current_kv


# --- the validation scenarios (docs/design.md, "Validation") ---


@pytest.mark.parametrize("dedup", [True, False])
def test_shared_physical_prefix_pages_in_one_batch(dedup):
    layout = assert_correct(SCENARIOS["shared_prefix_pages"], dedup)
    # pages 10 and 11 are read-only for all four requests: one slot each with dedup
    pages = layout.slot_page.tolist()
    assert (pages.count(10), pages.count(11)) == ((1, 1) if dedup else (4, 4))
    assert pages.count(12) == 4  # written by all four: four private slots


def test_shared_read_only_prefix_in_one_batch():
    layout = assert_correct(SCENARIOS["shared_prefix_read_only"])
    assert layout.slot_page.tolist().count(1) == 1 and layout.num_slots == 2 + 2 + 1 + 3


def test_cache_miss_mixed_in():
    layout = assert_correct(SCENARIOS["cache_miss_mixed"])
    assert layout.slot_table.tolist()[2][0] == layout.slot_table.tolist()[0][0]  # page 3 shared


def test_prefix_not_ending_on_a_page_boundary():
    batch = SCENARIOS["prefix_not_page_aligned"]
    assert_correct(batch)
    r = run(batch)
    got = reads(r)
    for b in (0, 1):  # rows 8..12 of page 41 are each request's own history, kept on its copy
        for i in range(8, 13):
            assert got[(b, i)].tolist()[:2] == [41, i - 8]
        assert got[(b, 13)].tolist()[:2] == [-1 - b, 13]


@pytest.mark.parametrize("strategy", ["zigzag", "interleave"])
@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_extend_lengths_not_divisible_by_2cp(cp, strategy):
    batch = SCENARIOS["extend_not_divisible"]
    assert_correct(batch)
    r = run(batch)
    split = cr.cp_split(
        r.layout.extend_lens, cp, r.token_req, r.out_cache_loc, r.current_kv, strategy=strategy
    )
    assert split.padded_len % (2 * cp if strategy == "zigzag" else cp) == 0
    req_l, loc_l, kv_l = split.companions
    gathered = kv_l.reshape(-1, kv_l.shape[-1])  # what an all-gather of every rank's rows yields
    assert torch.equal(cr.gather_order(gathered, split), r.current_kv)
    dense = cr.materialize(r.kv_pool, r.layout)
    # rank-major gathered rows fill correctly too: padding rows carry loc -1 and are skipped
    cr.fill_current(dense, gathered, req_l.reshape(-1), loc_l.reshape(-1), r.layout)
    assert torch.equal(dense, r.dense)


def test_one_and_two_token_extends():
    assert_correct(SCENARIOS["tiny_extends"])


def test_pages_allocated_in_the_same_step():
    layout = assert_correct(SCENARIOS["pages_allocated_same_step"])
    # page 7: A writes it (private slot), C reads it as history (another slot)
    assert layout.slot_page.tolist().count(7) == 2


def test_eviction_churn_across_steps():
    stale = torch.full((64, 8, 4), -7, dtype=torch.int32)  # one buffer reused across steps
    for batch in eviction_churn():
        assert_correct(batch)
        r = run(batch)
        dense = cr.materialize(r.kv_pool, r.layout, out=stale[: r.layout.num_slots])
        cr.fill_current(dense, r.current_kv, r.token_req, r.out_cache_loc, r.layout)
        assert torch.equal(dense, r.dense)


# --- adversarial groups ---


@pytest.mark.parametrize("group", sorted(ADVERSARIAL))
@pytest.mark.parametrize("dedup", [True, False])
def test_adversarial(group, dedup):
    assert_correct(ADVERSARIAL[group], dedup)


def test_adversarial_duplicate_page_in_request():
    with pytest.raises(ValueError, match="lists page 917 twice"):
        DUPLICATE_PAGE_IN_REQUEST.plan()


def test_minus_one_padding_keeps_the_last_pool_page():
    layout = ADVERSARIAL["minus_one_padding"].plan()
    assert layout.inverse[:, 15].tolist() == [0, 0, -1]  # request 2 lists 15 only stale
    assert layout.inverse[2].tolist().count(-1) == 15


def test_empty_request_has_no_slots_and_no_writes():
    layout = ADVERSARIAL["empty_request"].plan()
    assert layout.slot_table[1].tolist() == [-1, -1] and (layout.inverse[1] == -1).all()
    assert cr.current_page_mask(layout).tolist()[0] == [False, False]


# --- the legacy value-keyed inverse: the suite can see the bug (invariant 4) ---

SHARED_WRITTEN = sorted(n for n, b in {**SCENARIOS, **ADVERSARIAL}.items() if b.shared_written)


def test_the_shared_written_scenarios_exist():
    assert len(SHARED_WRITTEN) >= 4


@pytest.mark.parametrize("name", SHARED_WRITTEN)
def test_legacy_inverse_violates_invariant_1(name):
    batch = {**SCENARIOS, **ADVERSARIAL}[name]
    r = run(batch)
    legacy = _legacy.legacy_reads(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages,
        r.kv_pool, r.current_kv,
    )  # fmt: skip
    where = _legacy.first_violation(legacy, *_args(batch, r))
    assert where is not None, "the legacy inverse should leak across requests here"
    b, _ = where
    leaked = legacy[where].tolist()
    assert leaked[0] < 0 and leaked[0] != -1 - b  # another request's current row: the leak
    assert _legacy.first_violation(reads(r), *_args(batch, r)) is None  # the fix


@pytest.mark.parametrize("name", sorted({**SCENARIOS, **ADVERSARIAL}))
def test_legacy_inverse_is_right_at_batch_size_1(name):
    batch = {**SCENARIOS, **ADVERSARIAL}[name]
    for b in range(batch.batch_size):
        alone = batch.only(b)
        r = run(alone)
        legacy = _legacy.legacy_reads(
            alone.req_pages, alone.prefix, alone.extend, alone.page_size, alone.num_pages,
            r.kv_pool, r.current_kv,
        )  # fmt: skip
        assert _legacy.first_violation(legacy, *_args(alone, r)) is None


@pytest.mark.parametrize("name", ["pages_allocated_same_step", "eviction_churn/3"])
def test_legacy_current_page_mask_violates_invariant_1(name):
    batch = SCENARIOS[name]
    r = run(batch)
    args = (batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages)
    legacy_mask = _legacy.legacy_current_page_mask(*args)
    assert legacy_mask != cr.current_page_mask(r.layout).tolist()
    assert legacy_mask != _oracle.current_page_mask(*args[:4])
    legacy = _legacy.legacy_mask_reads(*args, r.kv_pool, r.current_kv)
    assert _legacy.first_violation(legacy, *_args(batch, r)) is not None
    for b in range(batch.batch_size):  # value-keyed and request-keyed agree at batch size 1
        alone = batch.only(b)
        one = (alone.req_pages, alone.prefix, alone.extend, alone.page_size, alone.num_pages)
        assert _legacy.legacy_current_page_mask(*one) == _oracle.current_page_mask(*one[:4])
