"""LayerStep (materialize -> fill_current -> remap_locs from precomputed tensors) against the
public ops on plan_layout's exact layout, on every backend that runs on CPU tensors here."""

from __future__ import annotations

import re

import cpkv_runtime as cr
import pytest
import torch
from _scenarios import ADVERSARIAL, SCENARIOS, Batch, pool_for

NAMED = {**SCENARIOS, **ADVERSARIAL}


def _inputs(batch: Batch, layout: cr.Layout, pad_rows: int = 2):
    """Current rows with CP-style padding rows (loc -1) and top-k locations per row."""
    token_req, _, loc = cr.current_tokens(layout)
    token_req = torch.cat([token_req, torch.zeros(pad_rows, dtype=torch.int32)])
    loc = torch.cat([loc, torch.full((pad_rows,), -1, dtype=torch.int32)])
    current = torch.randint(-(2**31), 2**31 - 1, (loc.shape[0], 4), dtype=torch.int32)
    span = batch.num_pages * batch.page_size
    locs = torch.randint(-1, span, (loc.shape[0], 5), dtype=torch.int64)
    return token_req, loc, current, locs


@pytest.mark.parametrize("name", sorted(NAMED))
def test_step_matches_public_ops_on_the_exact_layout(name, backend):
    batch = NAMED[name]
    exact = batch.plan()
    padded = cr.plan_layout_static(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages
    )
    token_req, loc, current, locs = _inputs(batch, exact)
    pool = pool_for(batch)
    step = cr.prepare_layer_step(padded, token_req, loc, backend=backend)
    assert set(step.backends.values()) == {backend}
    dense = torch.full((padded.num_slots, batch.page_size, 4), -7, dtype=torch.int32)
    out = torch.full(locs.shape, 99, dtype=torch.int32)
    for _ in range(2):  # a second layer reuses everything prepared
        step(pool, current, locs, dense, out)

    want = cr.materialize(pool, exact, backend="torch")
    cr.fill_current(want, current, token_req, loc, exact, backend="torch")
    n = exact.num_slots
    assert torch.equal(dense[:n], want)
    assert (dense[n:] == -7).all()  # padding slots are never written
    assert torch.equal(out, cr.remap_locs(locs, token_req, exact, backend="torch"))


def test_step_on_an_exact_layout_and_separate_row_requests():
    batch = SCENARIOS["cache_miss_mixed"]
    exact = batch.plan()
    token_req, loc, current, locs = _inputs(batch, exact, pad_rows=0)
    row_req = torch.arange(3, dtype=torch.int64)
    step = cr.prepare_layer_step(exact, token_req, loc, row_req=row_req, backend="torch")
    out = torch.empty((3, 5), dtype=torch.int32)
    step.remap(locs[:3], out)
    assert torch.equal(out, cr.remap_locs(locs[:3], row_req, exact))
    dense = step.build_dense(pool_for(batch), current, torch.empty((exact.num_slots, 8, 4)).int())
    cr.check_invariants(exact, pool_for(batch), dense, current, token_req, loc)


def _raises(match: str):
    return pytest.raises(cr.LayoutError, match=re.escape(match))


def test_per_layer_tensors_are_checked():
    batch = SCENARIOS["tiny_extends"]
    layout = cr.plan_layout_static(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages
    )
    token_req, loc, current, locs = _inputs(batch, layout)
    step = cr.prepare_layer_step(layout, token_req, loc)
    pool = pool_for(batch)
    dense = torch.empty((layout.num_slots, 8, 4), dtype=torch.int32)
    with _raises(f"dense must be ({layout.num_slots}, 8, *row)"):
        step.build_dense(pool, current, dense[:-1])
    with _raises("kv_pool, dense and current_kv rows must agree"):
        step.build_dense(pool, current[:, :3].contiguous(), dense)
    with _raises("kv_pool must be (8, 8, *row) with each leading-dim row contiguous"):
        step.build_dense(pool.transpose(1, 2).contiguous().transpose(1, 2), current, dense)
    step.build_dense(pool, current, dense)  # a good signature, then a bad one again
    with _raises("current_kv must be"):
        step.build_dense(pool, current[:-1], dense)
    with _raises(f"locs must be contiguous ({loc.shape[0]}, K)"):
        step.remap(locs[:-1], torch.empty((loc.shape[0] - 1, 5), dtype=torch.int32))
    with _raises("out must be contiguous int32"):
        step.remap(locs, torch.empty(locs.shape, dtype=torch.int64))
    with _raises("locs must be int32 or int64"):
        step.remap(locs.float(), torch.empty(locs.shape, dtype=torch.int32))
    mapped = torch.empty(locs.shape, dtype=torch.int32)
    step(pool, current, locs, dense, mapped)  # the whole layer: a good signature, then bad ones
    with _raises("current_kv must be"):
        step(pool, current[:-1], locs, dense, mapped)
    with _raises(f"dense_locs must be contiguous int32 {tuple(locs.shape)}"):
        step(pool, current, locs, dense, mapped.long())
    with _raises(f"locs must be contiguous ({loc.shape[0]}, K)"):
        step(pool, current, locs.t(), dense, mapped.t())


def test_prepare_validates_values_once():
    batch = SCENARIOS["tiny_extends"]
    layout = batch.plan()
    token_req, loc, _, _ = _inputs(batch, layout)
    with _raises("token_req[0] = 9 is not a request of this batch (B = 4)"):
        cr.prepare_layer_step(layout, torch.full_like(token_req, 9), loc)
    with _raises("out_cache_loc[0] = 64 is outside the pool [0, 64)"):
        cr.prepare_layer_step(layout, token_req, torch.full_like(loc, 64))
    with _raises("token_req (5,) and out_cache_loc (7,) must have one entry per current row"):
        cr.prepare_layer_step(layout, token_req[:5], loc)
    cr.prepare_layer_step(layout, torch.full_like(token_req, 9), loc, validate=False)
