"""check_invariants and CPKV_DEBUG=1: broken results are caught, with the culprit named."""

from __future__ import annotations

import dataclasses

import cpkv_runtime as cr
import pytest
import torch
from _scenarios import SCENARIOS, run
from cpkv_runtime import _dispatch

TORCH_OPS = cr.available_backends()["torch"].ops


def value_keyed_fill(dense, current_kv, token_req, out_cache_loc, inverse, page_size):
    """The legacy bug as a backend: one inverse row for all requests, last writer wins."""
    flat = inverse.clone()
    for b in range(1, inverse.shape[0]):
        flat[0] = torch.where(inverse[b] >= 0, inverse[b], flat[0])
    collapsed = flat[:1].expand_as(inverse).contiguous()
    TORCH_OPS["fill_current"](dense, current_kv, token_req, out_cache_loc, collapsed, page_size)


def off_by_one_materialize(kv_pool, slot_page, out=None):
    return TORCH_OPS["materialize"](kv_pool, (slot_page + 1) % kv_pool.shape[0], out)


def remap_to_slot_zero(locs, req_id, inverse, page_size, out=None):
    got = TORCH_OPS["remap_locs"](locs, req_id, inverse, page_size, out)
    return torch.where(got >= 0, got % page_size, got)


BUGGY = cr.Backend(
    "cuda",
    ops={
        "fill_current": value_keyed_fill,
        "materialize": off_by_one_materialize,
        "remap_locs": remap_to_slot_zero,
    },
    devices=frozenset({"cpu"}),
)


@pytest.fixture
def buggy(monkeypatch):
    reg = _dispatch.Registry([])
    reg.register(BUGGY)
    monkeypatch.setattr(_dispatch, "_REGISTRY", reg)


def test_debug_mode_passes_on_correct_ops(monkeypatch):
    monkeypatch.setenv("CPKV_DEBUG", "1")
    for name in SCENARIOS:
        r = run(SCENARIOS[name])
        cr.remap_locs(r.out_cache_loc.view(-1, 1), r.token_req, r.layout)


def test_debug_mode_catches_a_value_keyed_fill(monkeypatch, buggy):
    monkeypatch.delenv("CPKV_DEBUG", raising=False)
    r = run(SCENARIOS["shared_prefix_pages"], backend="torch")
    dense = cr.materialize(r.kv_pool, r.layout, backend="torch")
    cr.fill_current(dense, r.current_kv, r.token_req, r.out_cache_loc, r.layout)  # silent
    monkeypatch.setenv("CPKV_DEBUG", "1")
    dense = cr.materialize(r.kv_pool, r.layout, backend="torch")
    with pytest.raises(cr.InvariantError, match="fill_current wrote rows the definition does not"):
        cr.fill_current(dense, r.current_kv, r.token_req, r.out_cache_loc, r.layout)


def test_debug_mode_catches_a_wrong_materialize(monkeypatch, buggy):
    monkeypatch.delenv("CPKV_DEBUG", raising=False)
    layout = SCENARIOS["cache_miss_mixed"].plan()
    pool = torch.arange(16 * 8 * 2, dtype=torch.int32).view(16, 8, 2)
    cr.materialize(pool, layout)
    monkeypatch.setenv("CPKV_DEBUG", "1")
    with pytest.raises(cr.InvariantError, match="slot 0 differs from its source page 3"):
        cr.materialize(pool, layout)


def test_debug_mode_catches_a_wrong_remap(monkeypatch, buggy):
    layout = SCENARIOS["cache_miss_mixed"].plan()
    locs, req = torch.tensor([[48, 57]]), torch.tensor([1])  # pages 6, 7 of the cache miss
    monkeypatch.setenv("CPKV_DEBUG", "yes")
    with pytest.raises(cr.InvariantError, match="remap_locs differs from the definition"):
        cr.remap_locs(locs, req, layout)


def test_debug_mode_refuses_a_value_that_is_neither_on_nor_off(monkeypatch):
    """``maybe`` was silently off; it is refused as every command refuses it at start."""
    layout = SCENARIOS["cache_miss_mixed"].plan()
    monkeypatch.setenv("CPKV_DEBUG", "maybe")
    with pytest.raises(cr.LayoutError, match=r"CPKV_DEBUG='maybe': expected 1 or 0"):
        cr.remap_locs(torch.tensor([[48, 57]]), torch.tensor([1]), layout)


def test_check_invariants_names_a_foreign_history_row():
    r = run(SCENARIOS["shared_prefix_pages"])
    args = (r.kv_pool, r.dense, r.current_kv, r.token_req, r.out_cache_loc)
    cr.check_invariants(r.layout, *args)
    r.dense[int(r.layout.slot_table[2, 2]), 1] += 1  # request 2, position 17 (page 12)
    with pytest.raises(
        cr.InvariantError, match="request 2 history position 17 \\(page 12, slot 6\\)"
    ):
        cr.check_invariants(r.layout, *args)


def test_check_invariants_names_a_foreign_current_row():
    r = run(SCENARIOS["tiny_extends"])
    wrong = r.current_kv.clone()
    wrong[2] = r.current_kv[0]  # token 2 (request 1) checked against request 0's row
    with pytest.raises(
        cr.InvariantError, match="current token 2 of request 1 \\(pool location 33, slot 3\\)"
    ):
        cr.check_invariants(r.layout, r.kv_pool, r.dense, wrong, r.token_req, r.out_cache_loc)
    with pytest.raises(cr.InvariantError, match="do not cover each request's current positions"):
        cr.check_invariants(
            r.layout, r.kv_pool, r.dense, r.current_kv[1:], r.token_req[1:], r.out_cache_loc[1:]
        )


def test_check_invariants_catches_a_shared_written_slot():
    layout = SCENARIOS["shared_prefix_pages"].plan()
    # give request 1's written page 12 request 0's slot: one written slot, two owners
    table = layout.slot_table.clone()
    table[1, 2] = table[0, 2]
    inverse = layout.inverse.clone()
    inverse[1, 12] = table[0, 2]
    broken = dataclasses.replace(layout, slot_table=table, inverse=inverse)
    with pytest.raises(cr.InvariantError, match="invariant 2: request 0 writes page 12"):
        cr.check_invariants(broken)


def test_check_invariants_catches_a_stale_inverse():
    layout = SCENARIOS["cache_miss_mixed"].plan()
    inverse = layout.inverse.clone()
    inverse[0, 15] = 0  # an entry for a page request 0 does not use
    with pytest.raises(cr.InvariantError, match="inverse holds entries for pages no request uses"):
        cr.check_invariants(dataclasses.replace(layout, inverse=inverse))
