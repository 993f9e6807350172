"""interleave_kept_rows == SGLang's InterleaveCPStrategy.shard_per_request row selection.

SGLang's method computes the kept requests (``bs_idx_cpu``) on the host, then launches a Triton
kernel for the device copies. Replaced by ``_skv_sglang_rows``, because they need a GPU or process
groups: the kernel ``dsa_cp_interleave_q_seqs`` (its outputs are not compared; the host list is)
and the ``cp_rank`` property (read from the CP process group).
"""

from __future__ import annotations

import _sglang_env
import pytest
from _skv_sglang_rows import sglang_kept_rows
from hypothesis import given
from hypothesis import strategies as st
from sglang_cpkv.plugin.shared_kv import interleave_kept_rows

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


@pytest.mark.parametrize(
    ("extend", "cp"),
    [([1, 6], 2), ([1, 1, 300], 4), ([6, 1], 2), ([5, 7], 2), ([1, 1], 4), ([3, 1, 1, 1], 4)],
)
def test_table(extend, cp):
    for rank in range(cp):
        assert interleave_kept_rows(extend, cp, rank) == sglang_kept_rows(extend, cp, rank)


@given(
    extend=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    cp=st.integers(2, 8),
    data=st.data(),
)
def test_random(extend, cp, data):
    rank = data.draw(st.integers(0, cp - 1))
    assert interleave_kept_rows(extend, cp, rank) == sglang_kept_rows(extend, cp, rank)
