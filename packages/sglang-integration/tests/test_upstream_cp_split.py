"""``cpkv_runtime.cp_split`` held equal to SGLang 0.5.23's own CP strategies, called at run time.

For every rank, SGLang is run the way a CP prefill runs it: ``get_cp_strategy()`` binds
``ZigzagCPStrategy`` or ``InterleaveCPStrategy`` from the parallel context, ``prepare_cp_forward``
builds the metadata on a real ``ForwardBatch`` (``build_metadata``, then
``pad_logical_token_to_physical``), then ``local_q_indices`` gives the rank's tokens in order and
``shard_position_ids`` the rank's padded rows (its physical length). For interleave,
``cp_interleave_input_ids`` also gives every rank's padded rows, rank-major. ``cp_split``'s
``rows``, ``valid`` and ``local_len`` must equal them.

Nothing of SGLang is replaced. The context a server process would publish is stated through
SGLang's own scoped APIs:

- ``get_parallel().override(attn_cp_rank=r, attn_cp_size=cp, enable_prefill_cp=True,
  cp_strategy=..., enable_cp_tp_group_sharing=False)``: what ``ContextParallelStrategy.cp_rank``,
  ``get_cp_strategy``, ``get_cp_padding_align_size`` and ``prepare_cp_forward`` read;
- ``disable_cp_strategy()`` clears the process-wide strategy singleton for the block and restores
  it after, so ``get_cp_strategy()`` binds the strategy of this cp size;
- ``get_device()`` stays unpublished: ``build_metadata`` then takes its own fallback device for
  its attention tensors, which these checks do not read.

Where SGLang does not split a batch (zigzag with a request shorter than ``2*cp``, interleave with
fewer than ``cp`` tokens, or ``cp`` 1 where it binds no strategy) the test asserts that it does
not, and for cp > 1 still holds ``cp_split`` equal to what ``build_metadata`` +
``pad_logical_token_to_physical`` (the two calls of ``prepare_cp_forward``) give for those lengths:
``cp_split`` splits such batches by the same rule. (There, for a rank past the batch's last token,
interleave's ``local_q_indices`` raises, ``torch.arange(rank, T, cp)``; the rank's tokens are read
from ``shard_position_ids`` instead.)
"""

from __future__ import annotations

from dataclasses import dataclass

import _sglang_env as env
import cpkv_runtime as cr
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

STRATEGIES = ("zigzag", "interleave")


@dataclass
class Upstream:
    """What SGLang gives each rank of one batch."""

    applies: bool  # SGLang runs this batch under CP (``is_cp_active``)
    tokens: list[list[int]]  # per rank: local_q_indices, global token indices in order
    rows: list[list[int]]  # per rank: shard_position_ids(arange(T)), zero-padded to physical
    logical: list[int]  # per rank: real tokens (per_rank_logical_token)
    all_rows: list[int] | None  # interleave: cp_interleave_input_ids(arange(T) + 1), rank-major


def _forward_batch(extend: list[int]):
    """A real ForwardBatch of an extend (prefill) step with no cached prefix."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    total = sum(extend)
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=len(extend),
        input_ids=torch.zeros(total, dtype=torch.long),
        req_pool_indices=torch.arange(len(extend)),
        seq_lens=torch.tensor(extend),
        out_cache_loc=torch.arange(total),
        seq_lens_sum=total,
        extend_seq_lens_cpu=list(extend),
        seq_lens_cpu=torch.tensor(extend),
    )


def upstream(extend: list[int], cp: int, strategy: str) -> Upstream | None:
    """Run SGLang's strategy once per rank; None where SGLang binds no strategy (cp 1)."""
    from sglang.srt.layers.cp import base, padding, utils
    from sglang.srt.runtime_context import get_parallel

    total = sum(extend)
    out = Upstream(False, [], [], [], None)
    for rank in range(cp):
        context = dict(
            attn_cp_rank=rank,
            attn_cp_size=cp,
            enable_prefill_cp=True,
            cp_strategy=strategy,
            enable_cp_tp_group_sharing=False,
        )
        with base.disable_cp_strategy(), get_parallel().override(**context):
            impl = base.get_cp_strategy()
            if impl is None:
                return None
            fb = _forward_batch(extend)
            out.applies = utils.is_cp_active(fb)
            if out.applies:
                utils.prepare_cp_forward(fb)
            else:  # SGLang would run this batch without CP; its split rule still defines one
                fb.attn_cp_metadata = impl.build_metadata(total, list(extend), list(extend))
                padding.pad_logical_token_to_physical(fb.attn_cp_metadata)
            meta = fb.attn_cp_metadata
            out.rows.append(impl.shard_position_ids(torch.arange(total), fb).tolist())
            out.logical.append(meta.per_rank_logical_token[rank])
            if out.applies or strategy == "zigzag" or rank <= total:
                out.tokens.append(impl.local_q_indices(total, fb).tolist())
            else:  # interleave's local_q_indices raises for a rank past the last token
                out.tokens.append(out.rows[rank][: out.logical[rank]])
            if strategy == "interleave" and out.applies:
                out.all_rows = utils.cp_interleave_input_ids(torch.arange(total) + 1, fb).tolist()
    return out


def assert_equal_to_sglang(extend: list[int], cp: int, strategy: str) -> Upstream | None:
    split = cr.cp_split(extend, cp, strategy=strategy)
    up = upstream(extend, cp, strategy)
    total = sum(extend)
    if up is None:  # SGLang runs without CP: one rank computes every token, unpadded
        assert cp == 1
        assert split.rows.tolist() == [list(range(total))]
        return None
    rows, valid = split.rows, split.valid
    for rank in range(cp):
        where = f"{strategy} cp={cp} extend={extend} rank {rank}"
        assert rows[rank][valid[rank]].tolist() == up.tokens[rank], where  # tokens, in order
        assert int(valid[rank].sum()) == up.logical[rank], where
        # padded length and padding after the real rows (SGLang pads with zeros)
        assert torch.where(valid[rank], rows[rank], 0).tolist() == up.rows[rank], where
        assert split.local_len == len(up.rows[rank]), where
    if up.all_rows is not None:
        assert torch.where(valid, rows + 1, 0).reshape(-1).tolist() == up.all_rows
    return up


# Fixed table: the cases of the issue, several requests, cp 1..8, both strategies.
TABLE = [
    ([5], 2),
    ([177], 8),
    ([16], 2),
    ([4, 4], 2),
    ([7, 13, 9, 21], 2),
    ([7, 13, 9, 21], 3),
    ([64, 65, 66, 67], 4),
    ([100, 37, 250], 5),
    ([12, 12, 12, 12, 12, 12], 6),
    ([14, 15, 100, 1000], 7),
    ([16, 17, 31, 32, 33, 513], 8),
    ([7, 0, 1, 9], 2),  # empty and 1-token requests: SGLang's zigzag would not split this batch
    ([3], 4),  # fewer tokens than ranks: neither strategy would split it
    ([9, 4], 1),  # cp 1: SGLang binds no strategy
]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("extend", "cp"), TABLE)
def test_table_matches_sglang(extend, cp, strategy):
    assert_equal_to_sglang(extend, cp, strategy)


def test_the_cases_of_the_issue():
    """SGLang's own answers for the two cases the old equal-chunk split got wrong."""
    up = assert_equal_to_sglang([5], 2, "zigzag")
    assert up.tokens == [[0, 1, 4], [2, 3]]  # first 5 mod 4 = 1 block takes the extra token
    up = assert_equal_to_sglang([177], 8, "zigzag")
    assert up.logical == [23] + [22] * 7
    assert [len(r) for r in up.rows] == [32] * 8  # 23 rounded up to 2 * 8


def test_where_sglang_does_not_split():
    """The batches SGLang leaves unsplit: a request shorter than 2cp (zigzag), fewer than cp
    tokens (interleave), cp 1 (no strategy)."""
    assert not assert_equal_to_sglang([7, 0, 1, 9], 2, "zigzag").applies
    assert assert_equal_to_sglang([7, 0, 1, 9], 2, "interleave").applies
    assert not assert_equal_to_sglang([3], 4, "interleave").applies
    assert assert_equal_to_sglang([8, 8], 4, "zigzag").applies
    assert assert_equal_to_sglang([9, 4], 1, "zigzag") is None


@st.composite
def zigzag_batches(draw):
    """Batches SGLang's zigzag splits: every request has at least 2cp tokens."""
    cp = draw(st.integers(2, 8))
    lens = st.integers(2 * cp, 2 * cp + draw(st.sampled_from([3, 40, 400])))
    return draw(st.lists(lens, min_size=1, max_size=8)), cp


@settings(deadline=None)
@given(case=zigzag_batches())
def test_zigzag_batches_match_sglang(case):
    extend, cp = case
    assert assert_equal_to_sglang(extend, cp, "zigzag").applies


@settings(deadline=None)
@given(
    extend=st.lists(st.one_of(st.integers(0, 3), st.integers(0, 300)), min_size=1, max_size=8),
    cp=st.integers(1, 8),
    strategy=st.sampled_from(STRATEGIES),
)
def test_any_batch_matches_sglangs_rule(extend, cp, strategy):
    """Any lengths (0 and 1 included), whether or not SGLang would split the batch."""
    assert_equal_to_sglang(extend, cp, strategy)
