"""The one-pass dense build (``fill_sources`` + ``build_dense``) against ``materialize`` then
``fill_current``, the definition, on the torch backend.

Held equal, bitwise, on the named scenarios and on hypothesis batches (heavy page sharing, empty
requests, lengths on page boundaries), on exact and padded layouts, with CP padding rows; and
checked against plain-Python expectations where the two differ by construction: a ``used_slots``
bound, rows ``fill_current`` skips, a dense row named twice.
"""

from __future__ import annotations

import cpkv_runtime as cr
import pytest
import torch
from _scenarios import ADVERSARIAL, SCENARIOS, Batch, current_for, pool_for
from _strategies import batches
from hypothesis import given

NAMED = {**SCENARIOS, **ADVERSARIAL}
TORCH = cr.available_backends()["torch"].ops


def _rows(layout: cr.Layout, pad_rows: int = 3):
    """Current rows in a CP order (reversed) with -1 padding rows, as a split hands them over."""
    token_req, _, loc = cr.current_tokens(layout)
    current = current_for(layout)
    order = torch.arange(loc.shape[0] - 1, -1, -1)
    token_req = torch.cat([token_req[order], torch.full((pad_rows,), 5, dtype=torch.int32)])
    loc = torch.cat([loc[order], torch.full((pad_rows,), -1, dtype=torch.int32)])
    current = torch.cat([current[order], torch.full((pad_rows, current.shape[1]), 77).int()])
    return token_req, loc, current


def _definition(layout: cr.Layout, pool, current, token_req, loc, fill=-7) -> torch.Tensor:
    dense = torch.full((layout.num_slots, *pool.shape[1:]), fill, dtype=pool.dtype)
    cr.materialize(pool, layout, out=dense, backend="torch")
    cr.fill_current(dense, current, token_req, loc, layout, backend="torch")
    return dense


def _one_pass(layout: cr.Layout, pool, current, token_req, loc, fill=-7) -> torch.Tensor:
    dense = torch.full((layout.num_slots, *pool.shape[1:]), fill, dtype=pool.dtype)
    sources = TORCH["fill_sources"](
        token_req, loc, layout.inverse, layout.page_size, dense.shape[0]
    )
    TORCH["build_dense"](pool, layout.slot_page, current, sources, layout.used_slots, dense)
    return dense


def _padded(batch: Batch, extra: int = 2) -> cr.Layout:
    capacity = batch.batch_size * max(len(r) for r in batch.req_pages) + extra
    return cr.plan_layout_static(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages,
        max_slots=capacity, backend="torch",
    )  # fmt: skip


def _assert_one_pass_is_the_definition(batch: Batch) -> None:
    pool = pool_for(batch)
    for layout in (batch.plan(), _padded(batch)):
        token_req, loc, current = _rows(layout)
        want = _definition(layout, pool, current, token_req, loc)
        got = _one_pass(layout, pool, current, token_req, loc)
        assert torch.equal(got, want), f"{batch.name}: build_dense != materialize + fill_current"


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_batches(name):
    _assert_one_pass_is_the_definition(NAMED[name])


@given(batch=batches())
def test_random_batches(batch):
    _assert_one_pass_is_the_definition(batch)


def test_used_slots_bound_leaves_later_slots_alone():
    batch = SCENARIOS["shared_prefix_pages"]
    layout = batch.plan()
    pool = pool_for(batch)
    token_req, loc, current = _rows(layout)
    want = _definition(layout, pool, current, token_req, loc)
    sources = TORCH["fill_sources"](token_req, loc, layout.inverse, 8, layout.num_slots)
    for used in (0, 2, layout.num_slots, layout.num_slots + 4):
        dense = torch.full_like(want, -7)
        bound = torch.tensor([used], dtype=torch.int32)
        TORCH["build_dense"](pool, layout.slot_page, current, sources, bound, dense)
        n = min(used, layout.num_slots)
        assert torch.equal(dense[:n], want[:n]) and (dense[n:] == -7).all(), used


def test_fill_sources_by_hand():
    """P = 4; request 0 writes slot 0 (page 1), request 1 slot 1 (page 2). Rows 4 and 5 are
    skipped (a request outside the batch, a page past the pool); rows 1 and 6 name one dense row,
    and the later one stays; row 3 is padding. With one slot, request 1's slot is skipped."""
    inverse = torch.tensor([[-1, 0, -1], [-1, -1, 1]], dtype=torch.int32)
    token_req = torch.tensor([0, 0, 1, 0, 2, 1, 0], dtype=torch.int32)
    loc = torch.tensor([4, 6, 9, -1, 4, 13, 6], dtype=torch.int32)
    got = TORCH["fill_sources"](token_req, loc, inverse, 4, 3)
    assert got.tolist() == [[0, -1, 6, -1], [-1, 2, -1, -1], [-1, -1, -1, -1]]
    one_slot = TORCH["fill_sources"](token_req, loc, inverse, 4, 1)  # slot 1 is past the buffer
    assert one_slot.tolist() == [[0, -1, 6, -1]]


def test_step_uses_the_one_pass_build():
    """The per-layer sequence's sources (found once per forward), by hand.

    ``cache_miss_mixed``, P = 8: request 0 reads page 3 (slot 0, shared with request 2) and
    writes pages 4, 5 (slots 1, 2: positions 8..16); request 1 writes pages 6, 7, 8 (slots 3..5:
    positions 0..16); request 2 writes page 9 (slot 6: positions 8..11). Current row ``t`` of
    the 30 (request-major) is handed over at ``29 - t`` (``_rows`` reverses them, then appends
    three padding rows, 30..32, which name no dense row). Slots 7..10 are the padded capacity.
    """
    batch = SCENARIOS["cache_miss_mixed"]
    layout = _padded(batch)
    token_req, loc, _ = _rows(layout)
    step = cr.prepare_layer_step(layout, token_req, loc, backend="torch", validate=False)
    assert step.backends == dict.fromkeys(
        ("fill_sources", "build_dense", "remap_locs", "layer_step"), "torch"
    )
    none = [-1] * 8
    want = [
        none,  # slot 0: page 3, read-only: every row from the pool
        list(range(29, 21, -1)),  # slot 1: request 0, positions 8..15 (t = 0..7)
        [21, *none[1:]],  # slot 2: request 0, position 16 (t = 8)
        list(range(20, 12, -1)),  # slot 3: request 1, positions 0..7 (t = 9..16)
        list(range(12, 4, -1)),  # slot 4: request 1, positions 8..15 (t = 17..24)
        [4, *none[1:]],  # slot 5: request 1, position 16 (t = 25)
        [3, 2, 1, 0, *none[4:]],  # slot 6: request 2, positions 8..11 (t = 26..29)
        *[none] * 4,  # slots 7..10: capacity past the used slots
    ]
    assert step.sources.tolist() == want
