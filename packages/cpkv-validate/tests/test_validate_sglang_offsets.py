"""``--sglang-offsets``: SGLang 0.5.23's RAGGED offsets leak on the fresh-prompt shapes, fixed ones
do not, and the report names the request whose rows were read.

The rule functions are held equal to SGLang itself in
``packages/sglang-integration/tests/test_upstream_validate_ragged.py``; the tables here come from
the worked example of the upstream report (``[1, 6]`` at cp 2: rank 1 keeps only request 1 and
bases it at 0, where request 0's row is), worked by hand. The engine runs under real gloo groups.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from cpkv_runtime import cp_split
from cpkv_validate import (
    RAGGED_RULES,
    Options,
    main,
    ragged_chunk_branch,
    ragged_offsets,
    run_reference_many,
)
from cpkv_validate._step import SELF
from hypothesis import given, settings
from hypothesis import strategies as st

#: (extend lengths, rank's row requests, upstream offsets, fixed offsets), worked by hand.
OFFSETS = {
    "cp2_rank0_of_1_6": ([1, 6], [0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1]),
    "cp2_rank1_of_1_6": ([1, 6], [1, 1, 1], [0, 0, 0], [1, 1, 1]),
    "cp4_rank0_of_1_1_300": ([1, 1, 300], [0, 2, 2], [0, 1, 1], [0, 2, 2]),
    "cp4_rank1_of_1_1_300": ([1, 1, 300], [1, 2, 2], [0, 1, 1], [1, 2, 2]),
    "cp4_rank2_of_1_1_300": ([1, 1, 300], [2, 2], [0, 0], [2, 2]),
    "cp2_rank1_of_6_1": ([6, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]),
    "no_rows": ([3, 4], [], [], []),
}


@pytest.mark.parametrize("case", OFFSETS)
def test_offsets_table(case):
    extend, rows, upstream, fixed = OFFSETS[case]
    assert ragged_offsets(extend, rows, "upstream") == upstream
    assert ragged_offsets(extend, rows, "fixed") == fixed


BRANCH = {
    "fresh_interleave": ("interleave", 2, [1, 6], [0, 0], True),
    "fresh_zigzag": ("zigzag", 2, [1, 6], [0, 0], False),  # zigzag keeps every request
    "cp1": ("interleave", 1, [1, 6], [0, 0], False),
    "fewer_tokens_than_cp": ("interleave", 4, [1, 2], [0, 0], False),  # SGLang: no CP
    "exactly_cp_tokens": ("interleave", 4, [1, 1, 1, 1], [0, 0, 0, 0], True),
    "one_prefix": ("interleave", 2, [1, 6], [0, 16], False),
}


@pytest.mark.parametrize("case", BRANCH)
def test_chunk_branch_table(case):
    split, cp, extend, prefix, want = BRANCH[case]
    assert ragged_chunk_branch(split, cp, extend, prefix) is want


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ragged_offsets([1, 2], [0], "sglang"), "rule must be one of upstream, fixed"),
        (lambda: ragged_offsets([1, 2], [0, 2], "fixed"), "names request 2 but the batch has 2"),
        (lambda: ragged_chunk_branch("interleave", 2, [1], [0, 0]), "one of each per request"),
    ],
)
def test_bad_input_names_it(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@settings(max_examples=60, deadline=None)
@given(extend=st.lists(st.integers(1, 12), min_size=1, max_size=6), cp=st.integers(2, 5))
def test_fixed_offsets_put_every_row_on_its_own_token(extend, cp):
    """Over the engine's own interleave split: fixed offset + position is the row's token in the
    chunk, and upstream equals it exactly when the rank holds every request before the row's."""
    t = torch.arange(sum(extend))
    req = torch.repeat_interleave(torch.arange(len(extend)), torch.tensor(extend))
    pos = torch.cat([torch.arange(n) for n in extend])
    split = cp_split(extend, cp, req, pos, t, strategy="interleave")
    for rank in range(cp):
        r, p, tok = (x[x >= 0].tolist() for x in split.local(rank))
        fixed = ragged_offsets(extend, r, "fixed")
        upstream = ragged_offsets(extend, r, "upstream")
        assert [f + q for f, q in zip(fixed, p, strict=True)] == tok
        held = set(r)
        for b, f, u in zip(r, fixed, upstream, strict=True):
            assert (u == f) == all(a in held for a in range(b)), (rank, b)
            assert u <= f


# -- the engine under gloo ------------------------------------------------------------------------
@functools.cache
def _runs(cp: int) -> dict[tuple[str, str], object]:
    """Each offset rule (and upstream under zigzag) on the fresh-prompt scenarios, at ``cp``."""
    keys = [(rule, "interleave") for rule in RAGGED_RULES] + [("upstream", "zigzag")]
    names = ["fresh_prompts_cp2", "fresh_prompts_cp4"]
    opts = [
        Options(scenarios=names, cp=cp, split=s, allocator="sglang", sglang_offsets=rule)
        for rule, s in keys
    ]
    return dict(zip(keys, run_reference_many(opts), strict=True))


#: (cp, scenario) -> {victim: sources}, worked by hand from the split (token i on rank i % cp):
#: a rank missing an earlier request bases the later one on that request's first row.
LEAKS = {
    (2, "fresh_prompts_cp2"): {"f1": ["f0", SELF]},  # rank 1 misses f0
    (4, "fresh_prompts_cp2"): {"f1": ["f0", SELF]},  # ranks 1-3 miss f0
    (2, "fresh_prompts_cp4"): {"f1": ["f0"], "f2": ["f1", SELF]},  # rank 0 misses f1, 1 misses f0
    (4, "fresh_prompts_cp4"): {"f1": ["f0"], "f2": ["f0", "f1", SELF]},  # ranks 2, 3 miss both
}


@pytest.mark.parametrize(("cp", "scenario"), list(LEAKS), ids=[f"cp{c}-{s}" for c, s in LEAKS])
def test_upstream_offsets_leak_and_name_the_source(cp, scenario):
    (sc,) = [s for s in _runs(cp)[("upstream", "interleave")] if s.name == scenario]
    failed = {r.request: r.leak_sources for r in sc.requests if r.verdict == "FAIL"}
    assert failed == LEAKS[(cp, scenario)]
    for r in sc.requests:
        if r.verdict == "FAIL":
            assert r.max_abs_diff > 1e-3 and r.first_bad == 0
            assert all(lk["kind"] == "kv" for lk in r.leaks)  # the indexer reads its own keys


@pytest.mark.parametrize("cp", [2, 4])
def test_fixed_offsets_and_zigzag_match_batch_size_1(cp):
    for key in (("fixed", "interleave"), ("upstream", "zigzag")):
        for sc in _runs(cp)[key]:
            assert sc.ok, (key, sc.name, [(r.request, r.leak_sources) for r in sc.requests])
            assert all(r.max_abs_diff <= 1e-8 for r in sc.requests)


def test_cli_reports_the_leak_and_its_source(tmp_path, capsys):
    path = tmp_path / "r.json"
    argv = ["--sglang-offsets", "upstream", "--scenario", "fresh_prompts_cp2"]
    assert main([*argv, "--allocator", "sglang", "--json", str(path), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "sglang-offsets=upstream" in out and "f1 ← f0" in out and "CONTAMINATION" in out
    report = json.loads(path.read_text())
    assert report["config"]["sglang_offsets"] == "upstream"
    assert report["config"]["splits"] == ["interleave"]  # the flag's default split
    (sc,) = report["scenarios"]
    assert {r["request"]: r["verdict"] for r in sc["requests"]} == {"f0": "PASS", "f1": "FAIL"}
    argv[1] = "fixed"
    assert main([*argv, "--allocator", "sglang", "--no-progress"]) == 0
    assert "OK" in capsys.readouterr().out
