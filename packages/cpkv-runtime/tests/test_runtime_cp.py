"""CP split, gather_order and localize: oracle, round trips, padding, errors.

Expected rows come from ``_oracle.cp_split`` (the rule written out token by token) or were worked
out by hand from the rule; that every rank's tokens equal SGLang's is held by
``packages/sglang-integration/tests/test_upstream_cp_split.py``.
"""

from __future__ import annotations

import re

import _oracle
import cpkv_runtime as cr
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

CP_SIZES = [1, 2, 3, 4, 8]
STRATEGIES = ["zigzag", "interleave"]
extends = st.lists(st.one_of(st.integers(0, 40), st.integers(0, 300)), min_size=1, max_size=12)


@given(extend=extends, cp=st.sampled_from(CP_SIZES), strategy=st.sampled_from(STRATEGIES))
def test_cp_split_matches_oracle(extend, cp, strategy):
    split = cr.cp_split(extend, cp, strategy=strategy)
    assert split.rows.tolist() == _oracle.cp_split(extend, cp, strategy)
    assert split.valid.tolist() == [[v >= 0 for v in row] for row in split.rows.tolist()]
    assert int(split.valid.sum()) == split.num_tokens == sum(extend)
    if cp > 1:
        assert split.local_len % (2 * cp if strategy == "zigzag" else cp) == 0


@given(extend=extends, cp=st.sampled_from(CP_SIZES), strategy=st.sampled_from(STRATEGIES))
def test_round_trip_is_identity(extend, cp, strategy):
    total = sum(extend)
    token = torch.arange(total)
    payload = torch.randn(total, 3, 2)
    split = cr.cp_split(extend, cp, token, payload, strategy=strategy)
    for k, original in enumerate((token, payload)):
        per_rank = [split.local(r)[k] for r in range(cp)]  # what each rank holds
        assert all(p.shape[0] == split.local_len for p in per_rank)
        assert torch.equal(cr.gather_order(per_rank, split), original)  # all_gather (list)
        flat = torch.cat(per_rank)  # all_gather_into_tensor
        assert torch.equal(cr.gather_order(flat, split), original)
        assert torch.equal(
            cr.gather_order(flat.view(cp, split.local_len, *flat.shape[1:]), split), original
        )
        for r in range(cp):
            assert torch.equal(cr.localize(original, split, r), per_rank[r])
            assert torch.equal(cr.localize(flat, split, r, order="gathered"), per_rank[r])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("cp", CP_SIZES)
@pytest.mark.parametrize("bsz", range(1, 9))
def test_round_trip_uneven_batches(bsz, cp, strategy):
    extend = [(7 * b * b + 3 * b + 1) % 37 for b in range(bsz)]  # uneven, one may be 0
    token = torch.arange(sum(extend), dtype=torch.int32)
    split = cr.cp_split(torch.tensor(extend), cp, token, strategy=strategy)
    (local,) = split.companions
    assert torch.equal(cr.gather_order(local.reshape(-1), split), token)


def test_zigzag_is_per_request():
    # two requests of 8 tokens, cp=2: 4 blocks of 2 each; rank 0 takes blocks 0 and 3 of each,
    # first every request's block 0, then every request's block 3
    split = cr.cp_split([8, 8], 2, strategy="zigzag")
    assert split.rows.tolist() == [
        [0, 1, 8, 9, 6, 7, 14, 15],
        [2, 3, 10, 11, 4, 5, 12, 13],
    ]


# Worked out by hand from the rule: block k of an n-token request holds n // 2cp tokens, one more
# if k < n % 2cp; rows per rank = the longest rank rounded up to 2cp (zigzag) or cp (interleave).
HAND_TABLE = [
    # 5 tokens, blocks [0,1] [2] [3] [4]: rank 0 = blocks 0 + 3, rank 1 = blocks 1 + 2
    ([5], 2, "zigzag", [[0, 1, 4, -1], [2, 3, -1, -1]]),
    # blocks of [3, 1]: [0] [1] [2] [] and [3] [] [] []
    ([3, 1], 2, "zigzag", [[0, 3, -1, -1], [1, 2, -1, -1]]),
    # an empty and a 1-token request between two others (SGLang would not split this batch):
    # blocks [0] [1] [2] [3] | - | [4] [] [] [] | [5,6] [7,8] [9] [10]
    ([4, 0, 1, 6], 2, "zigzag", [[0, 4, 5, 6, 3, 10, -1, -1], [1, 7, 8, 2, 9, -1, -1, -1]]),
    ([7], 3, "interleave", [[0, 3, 6], [1, 4, -1], [2, 5, -1]]),
    ([3, 4], 1, "zigzag", [[0, 1, 2, 3, 4, 5, 6]]),  # cp 1: no split, no padding
    ([10], 4, "interleave", [[0, 4, 8, -1], [1, 5, 9, -1], [2, 6, -1, -1], [3, 7, -1, -1]]),
]


@pytest.mark.parametrize(("extend", "cp", "strategy", "rows"), HAND_TABLE)
def test_cp_split_hand_table(extend, cp, strategy, rows):
    assert cr.cp_split(extend, cp, strategy=strategy).rows.tolist() == rows


def test_first_blocks_take_the_remainder():
    # 177 tokens at cp 8: 16 blocks, block 0 has 12 tokens, blocks 1..15 have 11; rank 0 holds
    # blocks 0 and 15 (23 tokens), every other rank 22; 23 rounded up to 2 * 8 gives 32 rows
    split = cr.cp_split([177], 8, strategy="zigzag")
    assert split.valid.sum(1).tolist() == [23] + [22] * 7
    assert split.local_len == 32
    assert split.rows[0, :12].tolist() == list(range(12))
    assert split.rows[0, 12:23].tolist() == list(range(166, 177))


def test_padding_rows_are_masked():
    token_req = torch.tensor([0, 0, 0, 1], dtype=torch.int32)
    kv = torch.ones(4, 2, dtype=torch.bfloat16)
    flags = torch.ones(4, dtype=torch.bool)
    fp8 = torch.ones(4, 3).to(torch.float8_e4m3fn)
    split = cr.cp_split([3, 1], 2, token_req, kv, flags, fp8, strategy="zigzag")
    req_l, kv_l, flags_l, fp8_l = split.companions
    pad = ~split.valid
    assert (req_l[pad] == -1).all() and (kv_l[pad] == 0).all() and not flags_l[pad].any()
    assert (fp8_l.view(torch.uint8)[pad] == 0).all()
    assert split.padded_len == 8 and int(split.valid.sum()) == 4
    assert split.strategy == "zigzag" and split.cp_size == 2


def test_localize_answers_the_512_vs_64_crash():
    cp, local = 8, 64
    extend = [cp * local]  # T = 512, no padding
    rows = torch.randn(512, 4)
    split = cr.cp_split(extend, cp, rows, strategy="zigzag")
    gathered = torch.cat([split.local(r)[0] for r in range(cp)])
    assert gathered.shape[0] == 512
    mine = cr.localize(cr.gather_order(gathered, split), split, 3)
    assert mine.shape[0] == 64 and torch.equal(mine, split.local(3)[0])


def test_localize_refuses_the_wrong_row_count():
    # T = 7: blocks [0,1] [2] [3] [4] and [5] [6] [] []; ranks hold 4 and 3 rows -> 4 each
    split = cr.cp_split([5, 2], 2, strategy="zigzag")
    with pytest.raises(cr.LayoutError, match=re.escape("these look all-gathered (rank-major)")):
        cr.localize(torch.zeros(split.padded_len, 3), split, 0)
    with pytest.raises(cr.LayoutError, match="expects the batch's T = 7 rows in global order"):
        cr.localize(torch.zeros(6, 3), split, 0)
    with pytest.raises(cr.LayoutError, match="rank 2 is out of range for cp_size 2"):
        cr.localize(torch.zeros(7, 3), split, 2)
    with pytest.raises(cr.LayoutError, match="expects cp_size \\* local_len = 2 \\* 4 = 8"):
        cr.gather_order(torch.zeros(7, 3), split)
    with pytest.raises(cr.LayoutError, match="got 3 tensors for cp_size 2"):
        cr.gather_order([torch.zeros(4)] * 3, split)


def test_cp_split_validation():
    with pytest.raises(cr.LayoutError, match="companion 0 is a str, not a tensor"):
        cr.cp_split([3], 2, "interleave")
    with pytest.raises(cr.LayoutError, match="strategy must be one of"):
        cr.cp_split([3], 2, strategy="ring")
    with pytest.raises(cr.LayoutError, match="T = sum\\(extend_lens\\) = 3 tokens"):
        cr.cp_split([3], 2, torch.zeros(4))
    with pytest.raises(cr.LayoutError, match="cp_size must be >= 1"):
        cr.cp_split([3], 0)
    with pytest.raises(cr.LayoutError, match="extend_lens\\[1\\] = -2 is negative"):
        cr.cp_split([3, -2], 2)


def test_empty_batch_split():
    split = cr.cp_split([0, 0], 4, torch.zeros(0, 2), strategy="zigzag")
    assert split.local_len == 0 and cr.gather_order(torch.zeros(0, 2), split).shape == (0, 2)
    split = cr.cp_split([0], 3, strategy="interleave")
    assert split.local_len == 0
