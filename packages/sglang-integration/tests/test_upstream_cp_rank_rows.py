"""deepgemm_compat's rows-per-CP-rank rule, held equal to SGLang's CP strategies.

The reference is the installed sglang 0.5.23 code ``prepare_cp_forward`` runs for an extend
batch: the strategy's ``can_apply`` (else the forward runs without CP and every rank holds all
``T`` rows), ``build_metadata`` and ``pad_logical_token_to_physical``. The strategy is bound with
SGLang's own ``init_cp_strategy``. Replaced, for this file only:

* the ``get_parallel()`` lookup in ``layers/cp/base.py`` and ``layers/cp/padding.py``: an object
  with ``attn_cp_size`` and ``attn_cp_rank = 0`` (every rank's count is in the metadata);
* the ``get_device()`` lookup in ``layers/cp/zigzag.py``: ``"cpu"`` for its metadata tensors;
* the forward batch given to ``can_apply``: an object with the two fields it reads,
  ``forward_mode`` (SGLang's ``ForwardMode.EXTEND``) and ``extend_seq_lens_cpu``.

Cases: a fixed table (the issue's 2,504 and 23,136), random batches from hypothesis, and an
exhaustive maximum over every batch of a small token budget.
"""

from __future__ import annotations

import types

import _sglang_env as env
import pytest
from deepgemm_compat.warmup import cp_applies, max_rank_rows, rank_rows
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = [*env.SGLANG_IMPORT_WARNINGS]


@pytest.fixture(scope="module", autouse=True)
def _cp_lookups():
    from sglang.srt.layers.cp import base, zigzag

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base, "_STRATEGY", None)  # restored after the module's tests
        mp.setattr(zigzag, "get_device", lambda: types.SimpleNamespace(device="cpu"))
        yield mp


def sglang_rows(lens: list[int], cp: int, split: str) -> tuple[bool, int]:
    """SGLang's verdict for one extend batch: (CP applies, physical rows of each rank)."""
    from sglang.srt.layers.cp import base, padding
    from sglang.srt.layers.cp.base import get_cp_strategy, init_cp_strategy
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    parallel = types.SimpleNamespace(attn_cp_size=cp, attn_cp_rank=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base, "get_parallel", lambda: parallel)
        mp.setattr(padding, "get_parallel", lambda: parallel)
        init_cp_strategy(enable_prefill_cp=True, cp_size=cp, cp_strategy=split)
        strategy = get_cp_strategy()
        batch = types.SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_seq_lens_cpu=lens)
        total = sum(lens)
        if not strategy.can_apply(total, batch):
            return False, total
        metadata = strategy.build_metadata(num_tokens=total, seqs_len=lens, extend_seqs_len=lens)
        padding.pad_logical_token_to_physical(metadata)
        return True, max(metadata.per_rank_actual_token)


def partitions(total: int, smallest: int = 1):
    """Every multiset of extend lengths >= ``smallest`` summing to ``total``."""
    if total == 0:
        yield []
        return
    for first in range(smallest, total + 1):
        for rest in partitions(total - first, first):
            yield [first, *rest]


@pytest.mark.parametrize(
    ("lens", "cp", "split", "applies", "rows"),
    [
        ([20000], 8, "interleave", True, 2504),  # the issue: chunked 10000 -> forwards of 20000
        ([17] * 7710, 8, "zigzag", True, 23136),  # the issue: many short requests
        ([60000, 5], 8, "zigzag", False, 60005),  # one extend under 2 * cp: no CP at all
        ([7], 8, "interleave", False, 7),
        ([33], 4, "zigzag", True, 16),
    ],
)
def test_table(lens, cp, split, applies, rows):
    assert sglang_rows(lens, cp, split) == (applies, rows)
    assert (cp_applies(lens, cp, split), rank_rows(lens, cp, split)) == (applies, rows)


def test_issue_caps_are_the_maxima():
    """2,504 and 23,136 are reached (above) and are the maxima for their token budgets."""
    assert max_rank_rows(20000, 8, "interleave") == sglang_rows([20000], 8, "interleave")[1]
    assert max_rank_rows(131072, 8, "zigzag", cp_only=True) == 23136
    assert max_rank_rows(131072, 8, "zigzag") == sglang_rows([131071, 1], 8, "zigzag")[1]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    lens=st.one_of(
        st.lists(st.integers(1, 5000), min_size=1, max_size=24),
        st.integers(2, 64).flatmap(lambda n: st.lists(st.just(n), min_size=1, max_size=300)),
    ),
    cp=st.integers(2, 16),
    split=st.sampled_from(["zigzag", "interleave"]),
)
def test_random_batches(lens, cp, split):
    applies, rows = sglang_rows(lens, cp, split)
    assert (cp_applies(lens, cp, split), rank_rows(lens, cp, split)) == (applies, rows)
    assert rows <= max_rank_rows(sum(lens), cp, split)
    if applies:
        assert rows <= max_rank_rows(sum(lens), cp, split, cp_only=True)


@pytest.mark.parametrize(
    ("cp", "split", "m_top", "smallest"),
    [
        (2, "zigzag", 22, 1),
        (3, "zigzag", 22, 1),
        (4, "zigzag", 48, 8),  # only batches zigzag splits (every extend >= 8): cp_only
        (2, "interleave", 22, 1),
        (5, "interleave", 22, 1),
    ],
)
def test_brute_force_maximum(cp, split, m_top, smallest):
    """For every m <= m_top, the most rows SGLang gives a rank over every batch of at most m
    tokens (extends >= ``smallest``), and over those it splits, equal ``max_rank_rows``."""
    best = {True: 0, False: 0}
    for m in range(1, m_top + 1):
        for lens in partitions(m, smallest):
            applies, rows = sglang_rows(lens, cp, split)
            best[False] = max(best[False], rows)
            if applies:
                best[True] = max(best[True], rows)
        assert max_rank_rows(m, cp, split, cp_only=True) == best[True], m
        if smallest == 1:
            assert max_rank_rows(m, cp, split) == best[False], m
