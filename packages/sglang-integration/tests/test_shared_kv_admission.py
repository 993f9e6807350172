"""Admission: SGLang's PrefillAdder defers what cpkv's plan could not hold, so no admitted batch
fails mid-forward.

``PrefillAdder._kv_shard_reserve_scratch`` (SGLang 0.5.23) is called unbound on a namespace that
holds exactly the attributes it reads (the pattern of SGLang's own sharding tests); building a
whole ``PrefillAdder`` needs a radix cache and an allocator that are beside the point.
"""

from __future__ import annotations

from types import SimpleNamespace

import _sglang_env
import pytest
from _skv_shapes import P, Req, place
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.shared_kv import (
    ScratchCapacityError,
    ScratchGeometry,
    plan_forward,
)

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


def _adder(n: int, gather_pages: int, write_pages: int):
    from sglang.srt.mem_cache.page_interleave import PageShardSpec

    spec = PageShardSpec(
        shard_rank=0, shard_size=n, page_size=P,
        max_prefix_tokens=gather_pages * P, chunk_tokens=write_pages * P,
    )  # fmt: skip
    return SimpleNamespace(
        kv_shard_scratch_spec=spec, kv_shard_granule=P, kv_shard_size=n,
        kv_shard_block_bound_pages=0, kv_shard_chunk_pages=0,
    )  # fmt: skip


def _admit(reqs: list[Req], n: int, gather_pages: int, write_pages: int):
    """Run SGLang's reservation request by request; (admitted, first deferred index or None)."""
    from sglang.srt.managers.schedule_policy import PrefillAdder

    adder = _adder(n, gather_pages, write_pages)
    for i, r in enumerate(reqs):
        if not PrefillAdder._kv_shard_reserve_scratch(adder, r.prefix, r.extend):
            return reqs[:i], i
    return reqs, None


def _plan(reqs: list[Req], n: int, gather_pages: int, write_pages: int):
    batch = place("admitted", reqs, n)
    r2t = batch.req_to_token()
    import torch

    idx = torch.arange(len(reqs))
    for rank in range(n):
        plan_forward(
            r2t, idx, batch.prefix, batch.seq,
            batch.out_cache_loc(), ScratchGeometry(P, n, rank, gather_pages, write_pages),
            n * (batch.local_pages + 1),
        )  # fmt: skip
    return batch


def test_request_over_the_bound_is_deferred_and_the_rest_fits():
    n, gather, write = 4, 4 * 6, 8  # the gather region holds 6 pages per rank
    reqs = [Req("A", 8 * P, 10), Req("B", 8 * P, 20), Req("A", 8 * P, 5), Req("C", 4 * P, 3)]
    admitted, deferred = _admit(reqs, n, gather, write)
    # SGLang's bound counts each prefix per request: 2 + 2 + 2 pages per rank, then 1 more
    assert deferred == 3 and len(admitted) == 3
    _plan(admitted, n, gather, write)  # the admitted batch fits cpkv's plan
    # cpkv's plan would even hold C (the shared A prefix counts once: 5 pages per rank), but a
    # batch past the region stops at planning time, before any layer runs
    _plan([*admitted, reqs[3]], n, gather, write)
    with pytest.raises(ScratchCapacityError, match="needs 4 x 9 gather pages"):
        _plan([*admitted, reqs[3], Req("D", 16 * P, 1)], n, gather, write)


def test_request_that_never_fits_is_refused_not_deferred_forever():
    from sglang.srt.managers.schedule_policy import PrefillAdder

    adder = _adder(2, 2 * 2, 4)
    with pytest.raises(RuntimeError, match="cannot fit the sharded assembly scratch"):
        PrefillAdder._kv_shard_reserve_scratch(adder, 10 * P, 1)


@settings(max_examples=60, deadline=None)
@given(
    n=st.sampled_from([2, 4, 8]),
    reqs=st.lists(
        st.builds(
            Req,
            st.sampled_from(["A", "B", None]),
            st.integers(0, 12).map(lambda k: k * P),  # SGLang's radix hits are page-aligned
            st.integers(1, 4 * P),
        ),
        min_size=1,
        max_size=6,
    ),
    gather_per_rank=st.integers(1, 12),
    write=st.integers(4, 40),
)
def test_every_batch_sglang_admits_fits_the_plan(n, reqs, gather_per_rank, write):
    reqs = [r if r.chain is not None else Req(None, 0, r.extend) for r in reqs]
    try:
        admitted, _ = _admit(reqs, n, n * gather_per_rank, write)
    except RuntimeError:  # a request no empty batch could hold: refused at admission
        return
    if admitted:
        _plan(admitted, n, n * gather_per_rank, write)
