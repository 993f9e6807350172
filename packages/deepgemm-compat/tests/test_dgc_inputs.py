"""Every bad input to the facade raises InputError (a ValueError) naming tensor, expected,
actual and fix, before the wheel is called."""

from __future__ import annotations

import deepgemm_compat as dgc
import pytest
import torch

FP8 = torch.float8_e4m3fn


def paged(batch=4, next_n=1, heads=64, dim=128):
    return {
        "q": torch.zeros((batch, next_n, heads, dim), dtype=FP8),
        "kv_cache": torch.zeros((8, 64, 1, dim + 4), dtype=torch.uint8),
        "weights": torch.ones((batch * next_n, heads)),
        "context_lens": torch.ones((batch, next_n), dtype=torch.int32),
        "block_table": torch.zeros((batch, 8), dtype=torch.int32),
        "max_context_len": 512,
    }


PAGED_CASES = {
    "context_lens_1d": (
        {"context_lens": torch.ones(4, dtype=torch.int32)},
        r"context_lens must be 2-D int32 .*got 1-D.*view\(-1, 1\)",
    ),
    "context_lens_int64": (
        {"context_lens": torch.ones((4, 1), dtype=torch.int64)},
        r"context_lens must be torch.int32, got torch.int64; use .to\(torch.int32\)",
    ),
    "context_lens_wrong_next_n": (
        {"context_lens": torch.ones((4, 2), dtype=torch.int32)},
        r"\(batch, next_n\) = \(4, 1\) from q, got \(4, 2\)",
    ),
    "q_3d": (
        {"q": torch.zeros((4, 64, 128), dtype=FP8)},
        r"q must be 4-D \(batch, next_n, heads, dim\)",
    ),
    "q_bf16": (
        {"q": torch.zeros((4, 1, 64, 128), dtype=torch.bfloat16)},
        r"q must be torch.float8_e4m3fn",
    ),
    "kv_cache_fp8": (
        {"kv_cache": torch.zeros((8, 64, 1, 132), dtype=FP8)},
        r"kv_cache must be torch.uint8",
    ),
    "kv_cache_no_scale_bytes": (
        {"kv_cache": torch.zeros((8, 64, 1, 128), dtype=torch.uint8)},
        r"kv_cache.shape\[3\] must be 132 \(dim 128 fp8 bytes \+ 4 scale bytes\)",
    ),
    "weights_per_request": (
        {"weights": torch.ones((2, 64))},
        r"weights must have shape \(batch \* next_n, heads\) = \(4, 64\), got \(2, 64\)",
    ),
    "weights_bf16": (
        {"weights": torch.ones((4, 64), dtype=torch.bfloat16)},
        r"weights must be torch.float32",
    ),
    "block_table_rows": (
        {"block_table": torch.zeros((3, 8), dtype=torch.int32)},
        r"block_table.shape\[0\] must be 4 \(one row per request of q\)",
    ),
    "block_table_int64": (
        {"block_table": torch.zeros((4, 8), dtype=torch.int64)},
        r"block_table must be torch.int32",
    ),
    "not_a_tensor": ({"context_lens": [[1]] * 4}, r"context_lens must be a torch.Tensor, got list"),
}


@pytest.mark.parametrize("case", sorted(PAGED_CASES))
def test_paged_mqa_logits_bad_input(standin, case):
    state = standin("0.1.4.post1")
    change, pattern = PAGED_CASES[case]
    with pytest.raises(dgc.InputError, match=pattern):
        dgc.paged_mqa_logits(**{**paged(), **change})
    assert state.calls == []


def test_input_error_is_a_value_error():
    assert issubclass(dgc.InputError, ValueError)


def test_mixed_devices_are_named(standin):
    standin("0.1.4.post1")
    args = paged()
    args["weights"] = args["weights"].to("meta")
    with pytest.raises(dgc.InputError, match=r"one device, got .*weights on meta"):
        dgc.paged_mqa_logits(**args)


def ragged():
    return {
        "q": torch.zeros((5, 64, 128), dtype=FP8),
        "kv": torch.zeros((40, 128), dtype=FP8),
        "kv_scale": torch.ones(40),
        "weights": torch.ones((5, 64)),
        "ks": torch.zeros(5, dtype=torch.int32),
        "ke": torch.ones(5, dtype=torch.int32),
    }


RAGGED_CASES = {
    "kv_dim": (
        {"kv": torch.zeros((40, 64), dtype=FP8)},
        r"kv.shape\[1\] must be 128 \(head dim of q\)",
    ),
    "kv_scale_len": (
        {"kv_scale": torch.ones(39)},
        r"kv_scale.shape\[0\] must be 40 \(one scale per key\)",
    ),
    "ks_int64": ({"ks": torch.zeros(5, dtype=torch.int64)}, r"ks must be torch.int32"),
    "ke_len": ({"ke": torch.ones(4, dtype=torch.int32)}, r"ke.shape\[0\] must be 5"),
    "weights_shape": ({"weights": torch.ones((5, 32))}, r"weights must have shape \(5, 64\)"),
}


@pytest.mark.parametrize("case", sorted(RAGGED_CASES))
def test_mqa_logits_bad_input(standin, case):
    state = standin("0.2.5")
    change, pattern = RAGGED_CASES[case]
    with pytest.raises(dgc.InputError, match=pattern):
        dgc.mqa_logits(**{**ragged(), **change})
    assert state.calls == []


def pair(*shape, scale):
    return torch.zeros(shape, dtype=FP8), torch.ones(scale)


def gemm():
    return {
        "lhs": pair(8, 256, scale=(8, 2)),
        "rhs": pair(16, 256, scale=(1, 2)),
        "out": torch.empty((8, 16), dtype=torch.bfloat16),
    }


GEMM_CASES = {
    "lhs_not_pair": (
        {"lhs": torch.zeros((8, 256), dtype=FP8)},
        r"lhs must be a \(tensor, scale\) pair",
    ),
    "lhs_bf16": (
        {"lhs": (torch.zeros((8, 256), dtype=torch.bfloat16), torch.ones((8, 2)))},
        r"lhs\[0\] must be torch.float8_e4m3fn",
    ),
    "scale_rows": ({"lhs": pair(8, 256, scale=(7, 2))}, r"lhs\[1\].shape\[0\] must equal"),
    "k_mismatch": (
        {"rhs": pair(16, 128, scale=(1, 1))},
        r"rhs\[0\].shape\[1\] must be 256 \(K of lhs\)",
    ),
    "out_shape": (
        {"out": torch.empty((8, 8), dtype=torch.bfloat16)},
        r"out must have shape \(M, N\) = \(8, 16\)",
    ),
}


@pytest.mark.parametrize("case", sorted(GEMM_CASES))
def test_fp8_gemm_nt_bad_input(standin, case):
    state = standin("0.2.2")
    change, pattern = GEMM_CASES[case]
    with pytest.raises(dgc.InputError, match=pattern):
        dgc.fp8_gemm_nt(**{**gemm(), **change})
    assert state.calls == []


def test_contiguous_layout_given_twice_or_never(standin):
    standin("0.2.3.post2")
    lhs, rhs = pair(8, 256, scale=(8, 2)), pair(2, 16, 256, scale=(2, 1, 2))
    out, lay = torch.empty((8, 16), dtype=torch.bfloat16), torch.zeros(8, dtype=torch.int32)
    with pytest.raises(dgc.InputError, match=r"exactly once.*got 2"):
        dgc.grouped_gemm_contiguous(lhs, rhs, out, lay, m_indices=lay)
    with pytest.raises(dgc.InputError, match=r"exactly once.*got 0"):
        dgc.grouped_gemm_contiguous(lhs, rhs, out)
    with pytest.raises(dgc.InputError, match=r"layout must be torch.int32"):
        dgc.grouped_gemm_contiguous(lhs, rhs, out, lay.long())
    with pytest.raises(dgc.InputError, match=r"layout.shape\[0\] must be 8"):
        dgc.grouped_gemm_contiguous(lhs, rhs, out, lay[:4])
    with pytest.raises(
        dgc.UnsupportedFeatureError, match=r"takes no 'not_a_keyword'; it takes: a, b, d"
    ):
        dgc.grouped_gemm_contiguous(lhs, rhs, out, lay, not_a_keyword=1)


def test_masked_bad_input(standin):
    standin("0.2.3.post2")
    lhs, rhs = pair(4, 32, 256, scale=(4, 32, 2)), pair(4, 16, 256, scale=(4, 1, 2))
    out = torch.empty((4, 32, 16), dtype=torch.bfloat16)
    with pytest.raises(dgc.InputError, match=r"masked_m.shape\[0\] must be 4"):
        dgc.grouped_gemm_masked(lhs, rhs, out, torch.zeros(3, dtype=torch.int32), 8)
    with pytest.raises(dgc.InputError, match=r"rhs\[0\].shape\[0\] must be 4 \(groups of lhs\)"):
        dgc.grouped_gemm_masked(
            lhs, pair(2, 16, 256, scale=(2, 1, 2)), out, torch.zeros(4, dtype=torch.int32), 8
        )
    with pytest.raises(dgc.InputError, match=r"out must have shape \(G, M_max, N\)"):
        dgc.grouped_gemm_masked(lhs, rhs, out[:, :8], torch.zeros(4, dtype=torch.int32), 8)
