"""The DSA backend rules as a table (the hook on SGLang's real pass: test_plugin_sglang.py)."""

from __future__ import annotations

import pytest
from sglang_cpkv import DsaBackendError
from sglang_cpkv.plugin.hooks.dsa_backends import decide_dsa_backends, layout_family

FP8, BF16 = "fp8_e4m3", "bfloat16"


def _decide(kv, sm, user, sglang):
    return decide_dsa_backends(
        kv_cache_dtype=kv, sm_major=sm, user_prefill=user[0], user_decode=user[1],
        sglang_prefill=sglang[0], sglang_decode=sglang[1],
    )  # fmt: skip


def test_families():
    assert layout_family("trtllm") == "raw"
    for b in ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "flashmla_sparse_q8", "fa3"):
        assert layout_family(b) == "packed"
    for b in (None, "tilelang", "triton", "aiter", "intel_xpu"):
        assert layout_family(b) is None


@pytest.mark.parametrize(
    ("kv", "sm", "user", "sglang", "expected"),
    [
        # SGLang's defaults are kept: SM90 bf16, SM90 fp8, SM100 fp8, SM100 bf16 (any pair is fine)
        (BF16, 9, (None, None), ("flashmla_sparse", "fa3"), ("flashmla_sparse", "fa3")),
        (FP8, 9, (None, None), ("flashmla_kv", "flashmla_kv"), ("flashmla_kv", "flashmla_kv")),
        (FP8, 10, (None, None), ("trtllm", "trtllm"), ("trtllm", "trtllm")),
        (BF16, 10, (None, None), ("flashmla_sparse", "trtllm"), ("flashmla_sparse", "trtllm")),
        # user-set backends are kept
        (FP8, 10, ("trtllm", "trtllm"), ("trtllm", "trtllm"), ("trtllm", "trtllm")),
        (FP8, 9, ("flashmla_sparse", None), ("flashmla_sparse", "flashmla_kv"),
         ("flashmla_sparse", "flashmla_kv")),
        (FP8, 10, ("flashmla_kv", "flashmla_sparse"), ("flashmla_kv", "flashmla_sparse"),
         ("flashmla_kv", "flashmla_sparse")),
        # SGLang's SM100 fill builds the mix: the filled side follows the user's family
        (FP8, 10, ("flashmla_sparse", None), ("flashmla_sparse", "trtllm"),
         ("flashmla_sparse", "flashmla_kv")),
        (FP8, 10, ("flashmla_sparse_q8", None), ("flashmla_sparse_q8", "trtllm"),
         ("flashmla_sparse_q8", "flashmla_kv")),  # prefill-only backends are not copied
        (FP8, 10, (None, "flashmla_sparse"), ("trtllm", "flashmla_sparse"),
         ("flashmla_sparse", "flashmla_sparse")),
        (FP8, 10, ("trtllm", None), ("trtllm", "flashmla_kv"), ("trtllm", "trtllm")),
        (FP8, 10, (None, "trtllm"), ("flashmla_kv", "trtllm"), ("trtllm", "trtllm")),
        # a user value SGLang replaced is restored
        (BF16, 10, ("flashmla_kv", None), ("flashmla_sparse", "trtllm"),
         ("flashmla_kv", "trtllm")),
        # outside the families (tilelang): SGLang's own checks decide
        (FP8, 10, ("tilelang", "tilelang"), ("tilelang", "tilelang"), ("tilelang", "tilelang")),
    ],
)  # fmt: skip
def test_rules(kv, sm, user, sglang, expected):
    choice = _decide(kv, sm, user, sglang)
    assert (choice.prefill, choice.decode) == expected
    assert choice.notes  # every outcome carries a reason


def test_fill_reason_names_both_sides():
    choice = _decide(FP8, 10, ("flashmla_sparse", None), ("flashmla_sparse", "trtllm"))
    ((message, reason),) = choice.notes
    assert message == "decode trtllm -> flashmla_kv"
    assert "--dsa-prefill-backend flashmla_sparse" in reason and "trtllm" in reason


@pytest.mark.parametrize(
    ("user", "fix"),
    [
        (
            ("trtllm", "flashmla_kv"),
            "--dsa-prefill-backend flashmla_kv --dsa-decode-backend flashmla_kv",
        ),
        (
            ("flashmla_sparse", "trtllm"),
            "--dsa-prefill-backend flashmla_sparse --dsa-decode-backend flashmla_kv",
        ),
    ],
)
def test_user_set_fp8_mix_refused(user, fix):
    with pytest.raises(DsaBackendError) as info:
        _decide(FP8, 10, user, user)
    msg = str(info.value)
    assert f"--dsa-prefill-backend {user[0]}" in msg and f"--dsa-decode-backend {user[1]}" in msg
    assert "trtllm on both sides" in msg and fix in msg and "--kv-cache-dtype bfloat16" in msg


def test_user_set_mix_is_fine_with_bf16():
    choice = _decide(BF16, 10, ("trtllm", "flashmla_sparse"), ("trtllm", "flashmla_sparse"))
    assert (choice.prefill, choice.decode) == ("trtllm", "flashmla_sparse")


@pytest.mark.parametrize("kv", [FP8, BF16])
@pytest.mark.parametrize("user", [("trtllm", None), (None, "trtllm"), ("trtllm", "trtllm")])
def test_trtllm_below_sm100_refused(kv, user):
    sglang = tuple(u or "flashmla_kv" for u in user)
    with pytest.raises(
        DsaBackendError, match=r"is trtllm \(you set it\) but this GPU is SM90.*SM100"
    ):
        _decide(kv, 9, user, sglang)


def test_trtllm_chosen_by_sglang_below_sm100_refused():
    # SGLang declares trtllm itself for --dcp-size > 1 whatever the GPU.
    with pytest.raises(DsaBackendError, match=r"SGLang chose it"):
        _decide(FP8, 9, (None, None), ("trtllm", "trtllm"))
