"""plan_layout_static against plan_layout (the definition): same slots, bitwise, in fixed shapes.

Every backend that runs on CPU tensors here is held to plan_layout on random batches (hypothesis:
heavy page sharing, -1 padding and stale pages past the used ones, empty requests, lengths on page
boundaries, dedup on and off) and on the named scenarios; bad input raises plan_layout's own error.
"""

from __future__ import annotations

import re

import cpkv_runtime as cr
import pytest
import torch
from _scenarios import ADVERSARIAL, DUPLICATE_PAGE_IN_REQUEST, SCENARIOS, Batch
from _strategies import batches
from hypothesis import given
from hypothesis import strategies as st

FIELDS = ("req_pages", "prefix_lens", "extend_lens", "seq_lens", "pages_used", "slot_table")
NAMED = {**SCENARIOS, **ADVERSARIAL}


def _plan_static(batch: Batch, **kwargs) -> cr.Layout:
    return cr.plan_layout_static(
        torch.tensor(batch.req_pages, dtype=torch.int32).view(batch.batch_size, -1),
        batch.prefix,
        batch.extend,
        batch.page_size,
        batch.num_pages,
        **kwargs,
    )


def assert_same_as_plan_layout(got: cr.Layout, want: cr.Layout, capacity: int) -> None:
    """``got`` (padded) holds exactly ``want``'s slots, then -1 padding up to ``capacity``."""
    for name in (*FIELDS, "inverse"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype == torch.int32, name
        assert torch.equal(g, w), f"{name}: {g.tolist()} != {w.tolist()}"
    n = want.num_slots
    assert got.num_slots == capacity and got.padded and not want.padded
    assert got.used_slots.tolist() == [n] and got.status.tolist() == [0]
    assert got.slot_page[:n].tolist() == want.slot_page.tolist()
    assert got.slot_owner[:n].tolist() == want.slot_owner.tolist()
    assert (got.slot_page[n:] == -1).all() and (got.slot_owner[n:] == -1).all()
    assert got.num_tokens == want.num_tokens and got.dedup == want.dedup
    exact = got.exact()
    for name in (*FIELDS, "slot_page", "slot_owner", "inverse"):
        assert torch.equal(getattr(exact, name), getattr(want, name)), name


def _capacities(batch: Batch, want: cr.Layout) -> list[int]:
    """Tight (the slots needed), the host bound sum(pages_used), and the default B * M."""
    bound = int(want.pages_used.sum())
    return sorted({want.num_slots, bound, batch.batch_size * len(batch.req_pages[0])})


@given(batch=batches(), dedup=st.booleans())
def test_matches_plan_layout(batch, dedup, backend):
    want = batch.plan(dedup=dedup)
    for capacity in _capacities(batch, want):
        got = _plan_static(batch, max_slots=capacity, dedup=dedup, backend=backend)
        assert_same_as_plan_layout(got, want, capacity)
    got = _plan_static(batch, dedup=dedup, validate=False, num_tokens=sum(batch.extend))
    assert_same_as_plan_layout(got, want, batch.batch_size * len(batch.req_pages[0]))


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("dedup", [True, False])
def test_named_batches_match_plan_layout(name, dedup, backend):
    batch = NAMED[name]
    want = batch.plan(dedup=dedup)
    got = _plan_static(batch, dedup=dedup, backend=backend)
    assert_same_as_plan_layout(got, want, batch.batch_size * len(batch.req_pages[0]))
    cr.check_invariants(got)


def test_numbering_table():
    # b0 reads 5, 6; b1 reads 6, 5 then writes 8; b2 reads 5 and writes 6 (a private copy).
    got = cr.plan_layout_static([[5, 6, -1], [6, 5, 8], [5, 6, -1]], [16, 16, 8], [0, 3, 2], 8, 10)
    assert got.slot_table.tolist() == [[0, 1, -1], [1, 0, 2], [0, 3, -1]]
    assert got.slot_page.tolist() == [5, 6, 8, 6, -1, -1, -1, -1, -1]
    assert got.slot_owner.tolist() == [-1, -1, 1, 2, -1, -1, -1, -1, -1]
    assert got.used_slots.tolist() == [4] and got.num_tokens == 5
    assert "num_slots=9 (capacity; padded)" in repr(got)


def test_eight_requests_on_one_prefix_need_one_copy_of_it():
    page_size, prefix_pages, bsz = 64, 1024, 8  # a 64K-token prefix, 2K new tokens each
    rows = [[*range(prefix_pages), *range(2000 + 32 * b, 2032 + 32 * b)] for b in range(bsz)]
    args = (rows, [prefix_pages * page_size] * bsz, [2048] * bsz, page_size, 4096)
    got = cr.plan_layout_static(*args, max_slots=bsz * (prefix_pages + 32))
    assert got.used_slots.tolist() == [prefix_pages + bsz * 32]
    assert_same_as_plan_layout(got, cr.plan_layout(*args), bsz * (prefix_pages + 32))


def _raises(match: str):
    return pytest.raises(cr.LayoutError, match=re.escape(match))


BAD = {
    "duplicate_page_in_request": (
        DUPLICATE_PAGE_IN_REQUEST.req_pages,
        DUPLICATE_PAGE_IN_REQUEST.prefix,
        DUPLICATE_PAGE_IN_REQUEST.extend,
        8,
        1024,
    ),
    "duplicate_far_apart": ([[5, 1, 2, 5]], [30], [1], 8, 8),
    "page_out_of_range": ([[1, 8]], [8], [2], 8, 8),
    "absent_page_in_use": ([[1, -1]], [8], [2], 8, 8),
    "too_long": ([[1, 2]], [16], [1], 8, 8),
    "negative_extend": ([[1, 2]], [3], [-1], 8, 8),
    "negative_prefix": ([[1, 2]], [-9], [3], 8, 8),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_plan_layouts_error(case, backend):
    args = BAD[case]
    with pytest.raises(cr.LayoutError) as want:
        cr.plan_layout(*args)
    with _raises(str(want.value)):
        cr.plan_layout_static(*args, backend=backend)
    unchecked = cr.plan_layout_static(*args, backend=backend, validate=False, num_tokens=0)
    assert int(unchecked.status) != 0
    with _raises(str(want.value)):
        unchecked.verify()


def test_capacity_too_small():
    rows, prefix, extend = [[5, 6, -1], [6, 5, 8], [5, 6, -1]], [16, 16, 8], [0, 3, 2]
    with _raises("the batch needs 4 dense slots but max_slots = 3; fix: pass max_slots >="):
        cr.plan_layout_static(rows, prefix, extend, 8, 10, max_slots=3)
    got = cr.plan_layout_static(rows, prefix, extend, 8, 10, max_slots=3, validate=False)
    assert got.status.tolist() == [16] and got.used_slots.tolist() == [4]
    # The slot past capacity is dropped everywhere: no index can reach past the buffer.
    assert got.slot_table.tolist() == [[0, 1, -1], [1, 0, 2], [0, -1, -1]]
    assert got.inverse[2].tolist() == [-1] * 5 + [0] + [-1] * 4
    assert got.slot_page.tolist() == [5, 6, 8]
    with _raises("needs 4 dense slots but max_slots = 3"):
        got.verify()
    assert cr.plan_layout_static(rows, prefix, extend, 8, 10, max_slots=4).verify().padded


def test_num_tokens_given_is_checked_and_used():
    rows, prefix, extend = [[1, 2]], [8], [5]
    with _raises("num_tokens = 4 but sum(extend_lens) = 5"):
        cr.plan_layout_static(rows, prefix, extend, 8, 8, num_tokens=4)
    assert cr.plan_layout_static(rows, prefix, extend, 8, 8, num_tokens=5).num_tokens == 5
    trusted = cr.plan_layout_static(rows, prefix, extend, 8, 8, num_tokens=4, validate=False)
    assert trusted.num_tokens == 4  # taken as given: validate=False reads nothing back


def test_metadata_errors_without_validation():
    with _raises("extend_lens has 1 entries but req_pages has 2 rows"):
        cr.plan_layout_static([[1], [2]], [1, 1], [1], 8, 8, validate=False)
    with _raises("max_slots must be >= 0, got -1"):
        cr.plan_layout_static([[1]], [1], [1], 8, 8, max_slots=-1)
    with _raises("num_tokens must be an int, got 1.0"):
        cr.plan_layout_static([[1]], [1], [1], 8, 8, num_tokens=1.0)
    with _raises("req_pages must hold integer indices"):
        cr.plan_layout_static(torch.tensor([[1.0]]), [1], [1], 8, 8)


def test_empty_batch_and_zero_capacity():
    got = cr.plan_layout_static(torch.empty(0, 3, dtype=torch.int32), [], [], 64, 4)
    assert got.num_slots == 0 and got.inverse.shape == (0, 4) and got.used_slots.tolist() == [0]
    got = cr.plan_layout_static([[-1], [-1]], [0, 0], [0, 0], 64, 4, max_slots=0)
    assert got.status.tolist() == [0] and (got.inverse == -1).all()


def test_padded_layout_through_the_public_ops():
    """materialize leaves padding slots alone (torch as the kernels); the rest matches exact."""
    batch = SCENARIOS["shared_prefix_pages"]
    want = batch.plan()
    got = _plan_static(batch)
    pool = torch.randint(0, 2**31 - 1, (batch.num_pages, batch.page_size, 4), dtype=torch.int32)
    sentinel = torch.full((got.num_slots, batch.page_size, 4), -7, dtype=torch.int32)
    dense = cr.materialize(pool, got, out=sentinel.clone(), backend="torch")
    n = want.num_slots
    assert torch.equal(dense[:n], cr.materialize(pool, want, backend="torch"))
    assert torch.equal(dense[n:], sentinel[n:])
    cr.check_invariants(got, kv_pool=pool, dense=dense)
    token_req, _, loc = cr.current_tokens(got)
    current = torch.randint(0, 99, (got.num_tokens, 4), dtype=torch.int32)
    cr.fill_current(dense, current, token_req, loc, got, backend="torch")
    cr.check_invariants(got, pool, dense, current, token_req, loc)
