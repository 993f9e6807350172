"""CP split, gather_order and localize: oracle, round trips, padding, errors."""

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
extends = st.lists(st.integers(0, 40), min_size=1, max_size=8)


@given(extend=extends, cp=st.sampled_from(CP_SIZES), strategy=st.sampled_from(STRATEGIES))
def test_cp_split_matches_oracle(extend, cp, strategy):
    split = cr.cp_split(extend, cp, strategy=strategy)
    assert split.rows.tolist() == _oracle.cp_split(extend, cp, strategy)
    assert split.valid.tolist() == [[v >= 0 for v in row] for row in split.rows.tolist()]
    assert int(split.valid.sum()) == split.num_tokens == sum(extend)
    assert split.padded_len % (2 * cp if strategy == "zigzag" else cp) == 0


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
    # two requests of 8 tokens, cp=2: each cut into 4 chunks of 2; rank 0 takes chunks 0 and 3
    split = cr.cp_split([8, 8], 2, strategy="zigzag")
    assert split.rows.tolist() == [
        [0, 1, 6, 7, 8, 9, 14, 15],
        [2, 3, 4, 5, 10, 11, 12, 13],
    ]


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
    split = cr.cp_split([5, 2], 2, strategy="zigzag")  # T = 7, padded to 8 + 4 = 12
    with pytest.raises(cr.LayoutError, match=re.escape("these look all-gathered (rank-major)")):
        cr.localize(torch.zeros(split.padded_len, 3), split, 0)
    with pytest.raises(cr.LayoutError, match="expects the batch's T = 7 rows in global order"):
        cr.localize(torch.zeros(6, 3), split, 0)
    with pytest.raises(cr.LayoutError, match="rank 2 is out of range for cp_size 2"):
        cr.localize(torch.zeros(7, 3), split, 2)
    with pytest.raises(cr.LayoutError, match="expects cp_size \\* local_len = 2 \\* 6 = 12"):
        cr.gather_order(torch.zeros(7, 3), split)
    with pytest.raises(cr.LayoutError, match="got 3 tensors for cp_size 2"):
        cr.gather_order([torch.zeros(6)] * 3, split)


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
