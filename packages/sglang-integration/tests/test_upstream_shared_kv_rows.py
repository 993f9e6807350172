"""interleave_kept_rows == SGLang's InterleaveCPStrategy.shard_per_request row selection.

SGLang's method computes the kept requests (``bs_idx_cpu``) on the host, then launches a Triton
kernel for the device copies. Replaced here, because they need a GPU or process groups: the
kernel ``dsa_cp_interleave_q_seqs`` (its outputs are not compared; the host list is) and the
``cp_rank`` property (read from the CP process group).
"""

from __future__ import annotations

import _sglang_env
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sglang_cpkv.shared_kv import interleave_kept_rows

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


def _sglang_kept(extend: list[int], cp: int, rank: int, monkeypatch) -> list[int]:
    import sglang.kernels.ops.attention.dsa.cp_split as cp_split
    from sglang.srt.layers.cp.interleave import InterleaveCPStrategy

    monkeypatch.setattr(cp_split, "dsa_cp_interleave_q_seqs", lambda *a: (None, None))
    monkeypatch.setattr(InterleaveCPStrategy, "cp_rank", property(lambda self: rank))
    _, _, bs_idx_cpu, _ = InterleaveCPStrategy(cp).shard_per_request(
        list(extend), torch.tensor(extend)
    )
    return list(bs_idx_cpu)


@pytest.mark.parametrize(
    ("extend", "cp"),
    [([1, 6], 2), ([1, 1, 300], 4), ([6, 1], 2), ([5, 7], 2), ([1, 1], 4), ([3, 1, 1, 1], 4)],
)
def test_table(extend, cp, monkeypatch):
    for rank in range(cp):
        assert interleave_kept_rows(extend, cp, rank) == _sglang_kept(extend, cp, rank, monkeypatch)


@given(
    extend=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    cp=st.integers(2, 8),
    data=st.data(),
)
def test_random(extend, cp, data):
    rank = data.draw(st.integers(0, cp - 1))
    with pytest.MonkeyPatch.context() as mp:
        assert interleave_kept_rows(extend, cp, rank) == _sglang_kept(extend, cp, rank, mp)
