"""Pieces of the harness: the legacy fixture, top-k tie-breaking, the pool, scenarios, compare."""

from __future__ import annotations

import math

import pytest
import torch
from cpkv_runtime import plan_layout
from cpkv_validate import (
    REST,
    SCENARIOS,
    Engine,
    ModelConfig,
    build_scenario,
    init_weights,
    legacy_layout,
)
from cpkv_validate import _model as m
from cpkv_validate._compare import compare_rows
from cpkv_validate._rt import legacy_conflicts
from cpkv_validate._scenarios_sglang import SGLANG_SCENARIOS


def test_legacy_inverse_is_value_keyed_last_writer_wins():
    """Page 1: history for request 0, written by request 1 (its prefix ends mid-page)."""
    p = 16
    layout = plan_layout([[0, 1, 2], [3, 1, 4]], [2 * p, p + 4], [p, p], p, 8)
    fixed = layout.inverse
    assert fixed[0, 1] != fixed[1, 1]  # per request: b=1 has a private slot for page 1
    legacy = legacy_layout(layout).inverse
    assert legacy[0, 1] == legacy[1, 1] == fixed[1, 1]  # both sent to the last writer's slot
    assert legacy_conflicts(layout) == 1
    # Pages used by one request only are untouched; pages a request does not list stay -1.
    for b, pages in ((0, [0, 2]), (1, [3, 4])):
        for page in pages:
            assert legacy[b, page] == fixed[b, page]
    assert legacy[0, 3] == -1 and legacy[1, 0] == -1


def test_legacy_equals_per_request_without_written_sharing():
    p = 16
    layout = plan_layout([[0, 1, 2], [0, 1, 3]], [2 * p, 2 * p], [5, 9], p, 8)
    assert torch.equal(legacy_layout(layout).inverse, layout.inverse)


def test_select_topk_breaks_ties_by_position_and_sorts():
    scores = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0]])
    valid = torch.tensor([[True, True, True, True, False, True]])
    assert m.select_topk(scores, valid, 2).tolist() == [[1, 2]]
    assert m.select_topk(scores, valid, 3).tolist() == [[1, 2, 5]]
    few = torch.tensor([[True, False, False, False, False, False]])
    assert m.select_topk(scores, few, 3).tolist() == [[0, -1, -1]]


def test_prefix_hits_are_token_granular_and_copy_on_write_keeps_the_source_intact():
    cfg = ModelConfig()
    w = init_weights(cfg, seed=0)
    eng = Engine(cfg, w, num_pages=32)
    p = cfg.page_size
    base = list(range(3 * p))
    eng.admit("base", base)
    eng.step([("base", 3 * p)])
    shared = eng.requests["base"].pages[1]
    before = eng.pool.kv[0][shared].clone()
    a = eng.admit("a", [*base[: p + 5], 400, 401, 402])
    assert (a.hit, a.hit_source, a.pages) == (p + 5, "base", eng.requests["base"].pages[:2])
    eng.step([("a", 3)])
    assert a.pages[1] != shared  # a wrote into a page base also holds: it got a copy
    assert torch.equal(eng.pool.kv[0][shared], before)
    assert torch.equal(eng.pool.kv[0][a.pages[1]][:5], before[:5])
    full = eng.admit("b", [*base, 7])
    assert full.hit == 3 * p  # a whole-prompt hit still leaves one token to compute
    with pytest.raises(ValueError, match="already admitted"):
        eng.admit("b", base)
    with pytest.raises(ValueError, match="exceeds"):
        eng.step([("b", 2)])


def test_pool_exhaustion_is_a_clear_error():
    cfg = ModelConfig()
    eng = Engine(cfg, init_weights(cfg, seed=0), num_pages=2)
    eng.admit("a", list(range(3 * cfg.page_size)))
    with pytest.raises(MemoryError, match="KV pool exhausted: all 2 pages"):
        eng.step([("a", 3 * cfg.page_size)])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenarios_are_consistent(name):
    sc = build_scenario(name, page_size=16, seed=0)
    tokens, done = {}, {}
    for step in sc.steps:
        for req, toks in step.admit:
            assert req not in tokens
            tokens[req] = toks
            done[req] = None
        assert len({r for r, _ in step.batch}) == len(step.batch)
        assert all(ext is REST or ext >= 1 for _, ext in step.batch)
        # an admitted request runs in the step that admits it (its match is that step's)
        assert {r for r, _ in step.admit} <= {r for r, _ in step.batch}
    assert len(set(sc.markers.values())) == len(sc.markers)
    for req, toks in tokens.items():
        if req in sc.markers:
            assert sc.markers[req] in toks  # private text carries its own marker
        else:  # no private text: a whole-prompt hit of another request's prompt
            assert any(o != req and t[: len(toks)] == toks for o, t in tokens.items()), req
    assert sc.cp == SCENARIOS[name].cp


@pytest.mark.parametrize("name", list(SGLANG_SCENARIOS))
def test_sglang_shaped_scenarios_name_the_behaviour_they_model(name):
    doc = SGLANG_SCENARIOS[name].build.__doc__
    assert doc and "SGLang" in doc, name


def test_page_boundary_lengths_scale_sglangs_lengths_to_the_page():
    """63, 64, 65, 127, 129 at page 64 are P-1, P, P+1, 2P-1, 2P+1: each length is one
    request's prefix and another's suffix."""
    p = 16
    sc = build_scenario("page_boundary_lengths", page_size=p, seed=0)
    base = dict(sc.steps[0].admit)["base"]
    pairs = set()
    for _, toks in sc.steps[1].admit:
        pre = next(i for i, (a, b) in enumerate(zip(toks, base, strict=False)) if a != b)
        pairs.add((pre, len(toks) - pre))
    want = [p - 1, p, p + 1, 2 * p - 1, 2 * p + 1]
    assert sorted(pre for pre, _ in pairs) == want
    assert sorted(suf for _, suf in pairs) == want


def test_unknown_scenario():
    with pytest.raises(ValueError, match="unknown scenario 'x'; choose from shared_prefix_pages"):
        build_scenario("x", 16, 0)


def test_compare_rows():
    pos = torch.arange(3)
    a = torch.zeros(3, 4, dtype=torch.float64)
    b = a.clone()
    b[2, 1] = 0.5
    assert compare_rows(a, a, pos, 1e-8) == (0.0, None)
    assert compare_rows(b, a, pos, 1e-8) == (0.5, 2)
    b[1, 0] = float("nan")
    assert compare_rows(b, a, pos, 1e-8) == (math.inf, 1)
    assert compare_rows(a[:2], a, pos, 1e-8)[0] == math.inf


def test_model_config_validation():
    with pytest.raises(ValueError, match="qk_rope_head_dim=7 must be even"):
        ModelConfig(qk_rope_head_dim=7)
    with pytest.raises(ValueError, match="index_topk must be >= 1"):
        ModelConfig(index_topk=0)
