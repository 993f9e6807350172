"""Every scenario passes with the per-request layout (cp 1, 2, 4; zigzag and interleave; both
allocator models) and the legacy value-keyed inverse fails exactly where a written page is shared,
naming the request whose KV leaked in.

cp > 1 runs real ``torch.distributed`` gloo process groups (one group per cp size, all its runs
in the same group).
"""

from __future__ import annotations

import functools

import pytest
from cpkv_validate import ALLOCATORS, Options, run_reference_many, scenario_names

SPLITS = ("zigzag", "interleave")

#: Scenarios in which, with partial pages shared (``--allocator free``), two requests of one
#: batch list a page that one of them writes with its own, different tokens: the legacy inverse
#: must be caught in each. Not here: the fresh prompts (nothing shared) and
#: full_hit_short_extend (MAY_CATCH).
LEGACY_CATCHES = {
    "shared_prefix_pages",
    "cache_miss_mixed",
    "unaligned_prefix",
    "odd_extends",
    "tiny_extends",
    "same_step_alloc",
    "eviction_churn",
    "radix_page_aligned",
    "chunked_history_and_current",
    "two_prefix_chains",
    "page_boundary_lengths",
}
#: The requests writing the shared page all write the same tokens of the same prompt at the same
#: positions, so a swapped slot holds the same KV up to rounding: the audit's bitwise check sees
#: the foreign slot only where the copies round differently. With zigzag they rounded alike on
#: the runners this was written on, and differently at cp 1 on an AMD EPYC runner; caught or not,
#: the test accepts either.
MAY_CATCH = {"full_hit_short_extend"}


@functools.cache
def _runs(cp: int) -> dict[tuple[str, str, str], list]:
    keys = [(s, a, "per-request") for s in SPLITS for a in ALLOCATORS]
    if cp <= 2:
        keys += [("zigzag", a, "legacy") for a in ALLOCATORS]
    opts = [
        Options(scenarios=scenario_names(), cp=cp, split=s, allocator=a, inverse=i)
        for s, a, i in keys
    ]
    return dict(zip(keys, run_reference_many(opts), strict=True))


def _describe(results) -> str:
    return "; ".join(
        f"{s.name}/{r.request}: diff {r.max_abs_diff:.2e} leak {r.leak_sources}"
        for s in results
        for r in s.requests
        if r.verdict != "PASS"
    )


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cp", [1, 2, 4])
def test_per_request_layout_matches_batch_size_1(cp, split, allocator):
    results = _runs(cp)[(split, allocator, "per-request")]
    assert [s.name for s in results] == scenario_names()
    assert all(s.ok for s in results), _describe(results)
    for s in results:
        assert (s.cp, s.split, s.allocator) == (cp, split, allocator)
        assert s.legacy_conflicts == 0
        assert all(r.rows > 0 and r.max_abs_diff <= 1e-8 for r in s.requests)


@pytest.mark.parametrize("cp", [1, 2])
def test_legacy_inverse_reports_contamination_and_its_source(cp):
    results = _runs(cp)[("zigzag", "free", "legacy")]
    caught = {s.name for s in results if not s.ok}
    assert LEGACY_CATCHES <= caught <= LEGACY_CATCHES | MAY_CATCH, sorted(caught ^ LEGACY_CATCHES)
    for s in results:
        if s.name in caught:
            assert s.shared_written_pages > 0 and s.legacy_conflicts > 0, s.name
        names = {r.request for r in s.requests}
        for r in s.requests:
            if r.verdict == "FAIL":
                assert r.leak_sources, f"{s.name}/{r.request}: no leak source named"
                assert set(r.leak_sources) <= names - {r.request}, (s.name, r.leak_sources)
                assert r.leaks and all(lk["source"] in names for lk in r.leaks)


@pytest.mark.parametrize("cp", [1, 2])
def test_page_aligned_allocation_leaves_the_legacy_inverse_nothing_to_break(cp):
    """SGLang's allocator never lets two requests of a batch list a page one of them writes:
    the legacy inverse equals the per-request one, so no scenario can catch it there."""
    results = _runs(cp)[("zigzag", "sglang", "legacy")]
    for s in results:
        assert s.shared_written_pages == 0 and s.legacy_conflicts == 0, s.name
        assert s.ok, _describe([s])


def test_legacy_names_the_right_source_on_shared_prefix_pages():
    """a and d write the page b reads; d scans last: legacy sends a and b to d's slot."""
    sc = _runs(1)[("zigzag", "free", "legacy")][0]
    assert sc.name == "shared_prefix_pages"
    got = {r.request: (r.verdict, r.leak_sources) for r in sc.requests}
    assert got["a"] == ("FAIL", ["d"])
    assert got["b"] == ("FAIL", ["d"])
    assert got["c"][0] == got["d"][0] == got["base"][0] == "PASS"
