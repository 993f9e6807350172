"""Rows per CP rank: the per-batch rule, and its maximum against exhaustive enumeration.

The per-batch rule is held equal to SGLang's own ``build_metadata`` and padding by
``sglang-integration/tests/test_upstream_cp_rank_rows.py``; here the closed-form maximum is held
equal to the largest value over every batch of a small token budget.
"""

from __future__ import annotations

import pytest
from deepgemm_compat.warmup import cp_applies, max_rank_rows, rank_rows
from hypothesis import given, settings
from hypothesis import strategies as st

SPLITS = ("zigzag", "interleave")


def partitions(total: int, smallest: int = 1):
    """Every multiset of request lengths >= ``smallest`` summing to ``total``."""
    if total == 0:
        yield []
        return
    for first in range(smallest, total + 1):
        for rest in partitions(total - first, first):
            yield [first, *rest]


# Expected values: the measurements of SGLang (2504, 23,136) and hand derivations.
@pytest.mark.parametrize(
    ("m", "cp", "split", "cp_only", "rows"),
    [
        (20000, 8, "interleave", False, 2504),  # 2500 rows, rounded up to a multiple of 8
        (131072, 8, "zigzag", True, 23136),  # 7710 requests of 17 tokens: 3 rows each on rank 0
        (131072, 8, "zigzag", False, 131072),  # [131071, 1] runs without CP
        (16, 8, "zigzag", True, 16),  # one 16-token request: 2 rows a rank, padded to 16
        (15, 8, "zigzag", True, 0),  # no batch of 15 tokens can be split
        (15, 8, "zigzag", False, 15),
        (7, 8, "interleave", False, 7),  # fewer tokens than ranks: no CP
        (8, 8, "interleave", False, 8),  # one row a rank, padded to 8
        (5, 1, "none", False, 5),
        (65536, 8, "none", False, 65536),
    ],
)
def test_max_rank_rows_table(m, cp, split, cp_only, rows):
    assert max_rank_rows(m, cp, split, cp_only=cp_only) == rows


@pytest.mark.parametrize(
    ("lens", "cp", "split", "rows"),
    [
        ([17] * 7710, 8, "zigzag", 23136),
        ([60000, 5], 8, "zigzag", 60005),  # one short extend: the whole batch runs without CP
        ([20000], 8, "interleave", 2504),
        ([3, 4], 8, "interleave", 7),
        ([33], 4, "zigzag", 16),  # blocks 5,4,..,4: rank 0 holds blocks 0 and 7 = 9, padded
    ],
)
def test_rank_rows_table(lens, cp, split, rows):
    assert rank_rows(lens, cp, split) == rows


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cp", [2, 3])
def test_max_rank_rows_is_the_maximum_over_every_small_batch(cp, split):
    """Exhaustive: every multiset of extend lengths of at most m tokens, m <= 26."""
    best = {True: 0, False: 0}
    for m in range(1, 27):
        for lens in partitions(m):
            rows = rank_rows(lens, cp, split)
            best[False] = max(best[False], rows)
            if cp_applies(lens, cp, split):
                best[True] = max(best[True], rows)
        for cp_only in (True, False):
            assert max_rank_rows(m, cp, split, cp_only=cp_only) == best[cp_only], (m, cp_only)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    lens=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
    cp=st.integers(1, 16),
    split=st.sampled_from(SPLITS),
)
def test_no_batch_exceeds_the_maximum(lens, cp, split):
    rows = rank_rows(lens, cp, split)
    assert rows <= max_rank_rows(sum(lens), cp, split)
    if cp_applies(lens, cp, split):
        assert rows <= max_rank_rows(sum(lens), cp, split, cp_only=True)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: max_rank_rows(0, 8, "zigzag"), "m must be a positive int"),
        (lambda: max_rank_rows(100, 0, "zigzag"), "CP size must be a positive int"),
        (lambda: max_rank_rows(100, 8, "ring"), "split must be one of zigzag, interleave, none"),
        (lambda: rank_rows([4, 0], 2, "zigzag"), r"extend_lens must all be >= 1, got \[4, 0\]"),
    ],
)
def test_bad_input_messages(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
