"""Reference lightning indexer against a float64 oracle, on CPU and (marked gpu) CUDA."""

from __future__ import annotations

import pytest
import torch
from _indexcache_helpers import EXAMPLES, assert_topk_valid, oracle_logits
from hypothesis import given, settings
from hypothesis import strategies as st
from indexcache import (
    IndexerInputError,
    causal_window,
    indexer_logits,
    indexer_topk,
    lightning_indexer,
)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _inputs(m, n, h, d, device="cpu", dtype=torch.float32):
    q = torch.randn(m, h, d, device=device).to(dtype)
    k = torch.randn(n, d, device=device).to(dtype)
    w = torch.randn(m, h, device=device) * h**-0.5
    return q, k, w


@pytest.mark.parametrize("m,n", [(1, 1), (3, 7), (7, 7), (5, 64), (16, 65)])
@pytest.mark.parametrize("h,d", [(1, 4), (4, 16), (3, 24)])
def test_logits_match_oracle_causal(m, n, h, d):
    q, k, w = _inputs(m, n, h, d)
    ks, ke = causal_window(m, n)
    got = indexer_logits(q, k, w)
    want = oracle_logits(q, k, w, ks, ke)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("index_topk", [1, 4, 8, 100])
def test_topk_matches_oracle(index_topk):
    q, k, w = _inputs(9, 40, 4, 16)
    got = lightning_indexer(q, k, w, index_topk)
    assert got.dtype == torch.int32 and got.shape == (9, min(index_topk, 40))
    assert_topk_valid(got, oracle_logits(q, k, w, *causal_window(9, 40)), index_topk, atol=1e-5)


def test_custom_window_and_softmax_scale():
    """Two packed sequences (varlen, DeepGEMM-style ks/ke) with a custom scale."""
    q, k, w = _inputs(6, 10, 2, 8)
    ks = torch.tensor([0, 0, 0, 4, 4, 4], dtype=torch.int32)
    ke = torch.tensor([2, 3, 4, 8, 9, 10], dtype=torch.int32)
    got = indexer_logits(q, k, w, softmax_scale=0.3, ks=ks, ke=ke)
    torch.testing.assert_close(
        got.double(), oracle_logits(q, k, w, ks, ke, 0.3), atol=1e-5, rtol=1e-5
    )
    assert torch.isinf(got[3, :4]).all() and torch.isinf(got[0, 2:]).all()


def test_short_rows_pick_masked_keys_or_minus_one():
    q, k, w = _inputs(4, 4, 2, 8)  # row 0 sees one key but k = 3
    plain = lightning_indexer(q, k, w, 3)
    marked = lightning_indexer(q, k, w, 3, invalid_index=-1)
    assert marked[0].tolist()[1:] == [-1, -1] and marked[0, 0] == 0
    assert (marked[3] >= 0).all()
    keep = marked >= 0
    assert torch.equal(plain[keep], marked[keep])


@given(
    m=st.integers(1, 12),
    extra=st.integers(0, 30),
    h=st.integers(1, 4),
    d=st.sampled_from([4, 8, 16]),
    topk=st.integers(1, 20),
    chunk=st.integers(1, 13),
)
@settings(max_examples=EXAMPLES, deadline=None)
def test_chunked_rows_equal_one_shot(m, extra, h, d, topk, chunk):
    q, k, w = _inputs(m, m + extra, h, d)
    full = lightning_indexer(q, k, w, topk)
    chunked = lightning_indexer(q, k, w, topk, chunk_rows=chunk)
    logits = oracle_logits(q, k, w, *causal_window(m, m + extra))
    assert_topk_valid(chunked, logits, topk, atol=1e-5)
    assert_topk_valid(full, logits, topk, atol=1e-5)


def test_bf16_inputs_score_in_float32():
    q, k, w = _inputs(5, 12, 2, 16, dtype=torch.bfloat16)
    got = indexer_logits(q, k, w)
    assert got.dtype == torch.float32
    torch.testing.assert_close(
        got.double(), oracle_logits(q, k, w, *causal_window(5, 12)), atol=1e-4, rtol=1e-4
    )


# Bad input, by name ----------------------------------------------------------------------------
def _bad(**over):
    q, k, w = _inputs(4, 6, 2, 8)
    args = {"q": q, "k": k, "weights": w, **over}
    return args


BAD = {
    "q_not_3d": (_bad(q=torch.randn(4, 16)), r"q must be \(M, H, D\); got shape \(4, 16\)"),
    "k_head_dim": (_bad(k=torch.randn(6, 7)), r"k must be \(N, D\) with D = q.shape\[2\] = 8"),
    "weights_shape": (_bad(weights=torch.randn(4, 3)), r"weights must be \(M, H\) = \(4, 2\)"),
    "q_int": (_bad(q=torch.ones(4, 2, 8, dtype=torch.int32)), r"q must be a float tensor"),
    "more_queries_than_keys": (_bad(k=torch.randn(3, 8)), r"0 < num_queries <= num_keys"),
    "only_ks": (_bad(ks=torch.zeros(4, dtype=torch.int32)), r"give both ks and ke"),
    "ks_shape": (
        _bad(ks=torch.zeros(3, dtype=torch.int32), ke=torch.ones(3, dtype=torch.int32)),
        r"ks must be an \(4,\) integer tensor",
    ),
    "ke_float": (
        _bad(ks=torch.zeros(4, dtype=torch.int32), ke=torch.ones(4)),
        r"ke must be an \(4,\) integer",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_raise_before_compute(case):
    args, message = BAD[case]
    with pytest.raises(IndexerInputError, match=message):
        lightning_indexer(index_topk=2, **args)


@pytest.mark.parametrize("topk", [0, -1, True, 2.0])
def test_bad_topk(topk):
    with pytest.raises(IndexerInputError, match="index_topk must be an int >= 1"):
        indexer_topk(torch.zeros(2, 3), topk)
    with pytest.raises(IndexerInputError, match="index_topk must be an int >= 1"):
        lightning_indexer(**_bad(), index_topk=topk)


@pytest.mark.parametrize("chunk_rows", [0, 2.0])
def test_bad_chunk_rows(chunk_rows):
    with pytest.raises(IndexerInputError, match="chunk_rows"):
        lightning_indexer(**_bad(), index_topk=2, chunk_rows=chunk_rows)


# CUDA ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("m,n", [(7, 7), (64, 1000), (257, 2049)])
def test_cuda_matches_oracle(m, n):
    q, k, w = _inputs(m, n, 8, 64, device="cuda", dtype=torch.bfloat16)
    got = lightning_indexer(q, k, w, 64, chunk_rows=100)
    assert got.device.type == "cuda"
    ks, ke = causal_window(m, n)
    assert_topk_valid(got, oracle_logits(q, k, w, ks, ke), 64, atol=1e-3)


@pytest.mark.gpu
@cuda
def test_cuda_device_mismatch_raises():
    q, k, w = _inputs(4, 6, 2, 8)
    with pytest.raises(IndexerInputError, match="share a device"):
        lightning_indexer(q.cuda(), k, w.cuda(), 2)
