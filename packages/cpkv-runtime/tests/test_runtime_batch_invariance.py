"""Invariant 3: a request's toy attention output at batch size N (under any CP split) equals its
output alone at batch size 1 with CP off, bitwise.

Each query attends causally over its request's positions ``0..i`` read through
``remap_positions`` into the dense buffer; the math is per row with one fixed key width, so it is
batch-invariant and any difference can only come from reading the wrong rows.
"""

from __future__ import annotations

import math

import cpkv_runtime as cr
import pytest
import torch
from _scenarios import SCENARIOS, Batch
from _strategies import batches
from hypothesis import given, settings
from hypothesis import strategies as st

DIM = 8


def _rows(seed: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, DIM, generator=g)


def attention(batch: Batch, markers: list[int], width: int, cp: int = 1, strategy="zigzag"):
    """Per-token outputs (T, DIM) in global order; request b's data is seeded by markers[b]."""
    layout = batch.plan()
    pool = _rows(12345, batch.num_pages * batch.page_size).view(
        batch.num_pages, batch.page_size, DIM
    )
    token_req, token_pos, loc = cr.current_tokens(layout)
    current = torch.empty(layout.num_tokens, DIM)
    queries = torch.empty(layout.num_tokens, DIM)
    for b, m in enumerate(markers):  # each request's own current KV and queries
        mine = token_req == b
        current[mine] = _rows(2 * m + 1, batch.prefix[b] + batch.extend[b])[token_pos[mine].long()]
        queries[mine] = _rows(2 * m + 2, batch.prefix[b] + batch.extend[b])[token_pos[mine].long()]
    dense = cr.materialize(pool, layout)
    cr.fill_current(dense, current, token_req, loc, layout)
    flat = dense.reshape(-1, DIM)

    split = cr.cp_split(layout.extend_lens, cp, token_req, token_pos, queries, strategy=strategy)
    outs = []
    for rank in range(cp):  # each rank: its own queries over the full dense buffer
        req_l, pos_l, q_l = split.local(rank)
        keys = torch.arange(width).view(1, -1).expand(req_l.shape[0], -1)
        keys = torch.where(keys <= pos_l.long().view(-1, 1), keys, -1)  # causal, -1 padded
        dense_loc = cr.remap_positions(keys, req_l, layout)
        k = flat[dense_loc.long().clamp_min(0)]
        scores = (q_l.unsqueeze(1) * k).sum(-1) / math.sqrt(DIM)
        scores = scores.masked_fill(dense_loc < 0, float("-inf"))
        p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # padding rows attend to nothing
        outs.append((p.unsqueeze(-1) * k).sum(1))
    return layout, cr.gather_order(outs, split)


def assert_batch_invariant(batch: Batch, cp: int, strategy: str) -> None:
    width = max([p + e for p, e in zip(batch.prefix, batch.extend, strict=True)] + [1])
    markers = list(range(batch.batch_size))
    layout, together = attention(batch, markers, width, cp, strategy)
    token_req, _, _ = cr.current_tokens(layout)
    for b in range(batch.batch_size):
        _, alone = attention(batch.only(b), [b], width)
        assert torch.equal(together[token_req == b], alone), (batch.name, b, cp, strategy)


@pytest.mark.parametrize("strategy", ["zigzag", "interleave"])
@pytest.mark.parametrize("cp", [1, 2, 3, 4])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenarios_are_batch_invariant(name, cp, strategy):
    assert_batch_invariant(SCENARIOS[name], cp, strategy)


# An extra property on top of the oracle ones: 100 examples are plenty (each runs B + 1 batches).
@settings(max_examples=min(settings().max_examples, 100))
@given(
    batch=batches(max_batch=4),
    cp=st.sampled_from([1, 2, 4]),
    strategy=st.sampled_from(["zigzag", "interleave"]),
)
def test_random_batches_are_batch_invariant(batch, cp, strategy):
    assert_batch_invariant(batch, cp, strategy)
