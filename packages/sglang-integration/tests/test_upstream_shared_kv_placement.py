"""The local rows cpkv's pool persists to == SGLang's ``PageInterleavePlacement`` (0.5.23).

SGLang's placement (``mem_cache/page_interleave.py``): logical ``loc`` is owned by rank
``owner_of(loc)`` at local row ``local_index(loc)``; its pool writes only the owned rows (a
``nonzero`` filter). cpkv's pool writes every row instead (a fixed shape, no host sync): owned
rows where SGLang puts them, the others onto the reserved local page 0 at their offset in the
page (SGLang's padding page, never read). Checked for ``owned_local_rows`` (what
``CpkvSharedKVPool.cpkv_persist_rows`` returns for any location tensor) and for the plan's
precomputed ``local_rows`` (``ForwardScratch.persist_rows`` of the batch's ``out_cache_loc``).
"""

from __future__ import annotations

import _sglang_env
import pytest
import torch
from _skv_shapes import SHAPES, P, place
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.shared_kv import ScratchGeometry, owned_local_rows, plan_forward

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


def _sglang_placement(page_size: int, shard_size: int, rank: int):
    from sglang.srt.mem_cache.page_interleave import PageInterleavePlacement, PageShardSpec

    spec = PageShardSpec(shard_rank=rank, shard_size=shard_size, page_size=page_size,
                         max_prefix_tokens=0, chunk_tokens=0)  # fmt: skip
    return PageInterleavePlacement(spec)


def _check_rows(rows: torch.Tensor, loc: torch.Tensor, page_size: int, n: int, rank: int):
    """``rows`` (local rows for ``loc`` on ``rank``) against SGLang's placement."""
    placement = _sglang_placement(page_size, n, rank)
    loc = loc.long()
    owned = placement.local_mask(loc, rank)
    assert torch.equal(rows[owned], placement.filter_local(loc, rank))
    assert torch.equal(rows[owned], placement.local_index(loc)[owned])
    assert torch.equal(rows[~owned], loc[~owned] % page_size)  # local page 0, same offset


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 8),
    page_size=st.sampled_from([1, 4, 64]),
    data=st.data(),
    dtype=st.sampled_from([torch.int32, torch.int64]),
)
def test_owned_local_rows_are_sglangs(n, page_size, data, dtype):
    rank = data.draw(st.integers(0, n - 1))
    locs = data.draw(st.lists(st.integers(0, 40 * n * page_size), min_size=1, max_size=300))
    loc = torch.tensor(locs, dtype=dtype)
    rows = owned_local_rows(loc, page_size, n, rank)
    assert rows.dtype == torch.int64 and rows.shape == loc.shape
    _check_rows(rows, loc, page_size, n, rank)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_every_rank_owns_each_location_once(n):
    """Over the ranks, every location is owned by exactly one (SGLang's ``owner_of``), and the
    owned rows of one rank are distinct (no two locations collide on a rank's pool)."""
    loc = torch.arange(5 * n * P)
    owners = torch.zeros_like(loc)
    for rank in range(n):
        placement = _sglang_placement(P, n, rank)
        owned = placement.local_mask(loc, rank)
        owners += owned
        rows = owned_local_rows(loc, P, n, rank)[owned]
        assert rows.unique().numel() == rows.numel()
        assert bool((rows >= 0).all())
    assert bool((owners == 1).all())


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("name", list(SHAPES))
def test_the_plans_local_rows_are_sglangs(name, cp):
    """The rows the plan precomputed for the batch's current tokens (``shard_plan``'s
    ``local_rows``) follow SGLang's placement on every rank."""
    batch = place(name, SHAPES[name], cp)
    oc = batch.out_cache_loc()
    for rank in range(cp):
        history = sum(-(-q // P) for q in batch.prefix)
        geo = ScratchGeometry(P, cp, rank, cp * history, sum(len(w) for w in batch.writers))
        plan = plan_forward(batch.req_to_token(), torch.arange(len(batch.pages)), batch.prefix,
                            batch.seq, oc, geo, cp * (batch.local_pages + 1))  # fmt: skip
        rows = plan.persist_rows(plan.out_cache_loc, geo)
        assert rows is plan.local_rows
        _check_rows(rows, oc, P, cp, rank)
