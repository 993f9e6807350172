"""Every scenario passes with the per-request layout (cp 1, 2, 4; zigzag and interleave) and
fails with the legacy value-keyed inverse, naming the request whose KV leaked in.

cp > 1 runs real ``torch.distributed`` gloo process groups (one spawn per cp size, all its runs
in the same group).
"""

from __future__ import annotations

import functools

import pytest
from cpkv_validate import Options, run_reference_many, scenario_names

SPLITS = ("zigzag", "interleave")


@functools.cache
def _runs(cp: int) -> dict[tuple[str, str], list]:
    keys = [(s, "per-request") for s in SPLITS]
    if cp <= 2:
        keys.append(("zigzag", "legacy"))
    opts = [Options(scenarios=scenario_names(), cp=cp, split=s, inverse=i) for s, i in keys]
    return dict(zip(keys, run_reference_many(opts), strict=True))


def _describe(results) -> str:
    return "; ".join(
        f"{s.name}/{r.request}: diff {r.max_abs_diff:.2e} leak {r.leak_sources}"
        for s in results
        for r in s.requests
        if r.verdict != "PASS"
    )


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cp", [1, 2, 4])
def test_per_request_layout_matches_batch_size_1(cp, split):
    results = _runs(cp)[(split, "per-request")]
    assert [s.name for s in results] == scenario_names()
    assert all(s.ok for s in results), _describe(results)
    for s in results:
        assert s.legacy_conflicts == 0
        assert all(r.rows > 0 and r.max_abs_diff <= 1e-8 for r in s.requests)


@pytest.mark.parametrize("cp", [1, 2])
def test_legacy_inverse_reports_contamination_and_its_source(cp):
    results = _runs(cp)[("zigzag", "legacy")]
    for s in results:
        # Every scenario lists a page from two requests of one batch with one writing it.
        assert s.shared_written_pages > 0, s.name
        assert s.legacy_conflicts > 0, s.name
        assert not s.ok, f"{s.name}: the legacy inverse went unnoticed"
        names = {r.request for r in s.requests}
        for r in s.requests:
            if r.verdict == "FAIL":
                assert r.leak_sources, f"{s.name}/{r.request}: no leak source named"
                assert set(r.leak_sources) <= names - {r.request}, (
                    s.name,
                    r.request,
                    r.leak_sources,
                )
                assert r.leaks and all(lk["source"] in names for lk in r.leaks)


def test_legacy_names_the_right_source_on_shared_prefix_pages():
    """a and d write the page b reads; d scans last: legacy sends a and b to d's slot."""
    sc = _runs(1)[("zigzag", "legacy")][0]
    assert sc.name == "shared_prefix_pages"
    got = {r.request: (r.verdict, r.leak_sources) for r in sc.requests}
    assert got["a"] == ("FAIL", ["d"])
    assert got["b"] == ("FAIL", ["d"])
    assert got["c"][0] == got["d"][0] == got["base"][0] == "PASS"
