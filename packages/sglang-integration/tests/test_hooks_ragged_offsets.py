"""The ``ragged-offsets`` rule in plain Python, and which deployments it applies to.

``ragged_exposure`` (what ``cpkv-serve --dry-run`` prints) restates SGLang's choice of top-k
transform; ``test_exposure_matches_the_backends_choice`` holds it equal to what SGLang 0.5.23's
``DeepseekSparseAttnBackend`` picks for a fresh batch, per resolved deployment (harness and
stand-ins: ``_sglang_dsa.py``, ``_dsa_stand_ins.py``). The row rule is held against SGLang's own
``interleave_rows_per_request``; its offsets against SGLang's metadata in
``test_upstream_ragged_offsets.py``.
"""

from __future__ import annotations

import json

import _dsa_stand_ins as stand_ins
import _sglang_dsa as dsa
import _sglang_env as env
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.hooks.ragged_offsets import (
    attended_offsets,
    ragged_exposure,
    rank_rows,
    sglang_offsets,
)

pytestmark = env.SGLANG_IMPORT_WARNINGS

PACKED, RAW, BF16 = "packed fp8 (FlashMLA)", "raw fp8 (trtllm)", "bf16"


def test_rule_on_the_smallest_case():
    """[1, 6] at cp 2: rank 1 holds request 1's positions 0, 2, 4; SGLang bases them at 0,
    attention's KV has them at 1."""
    assert rank_rows([1, 6], 2, 1) == [(1, 0), (1, 2), (1, 4)]
    assert sglang_offsets([1, 6], [0, 0], 2, 1) == [0, 0, 0]
    assert attended_offsets([1, 6], [0, 0], 2, 1) == [1, 1, 1]
    assert sglang_offsets([1, 6], [0, 0], 2, 0) == attended_offsets([1, 6], [0, 0], 2, 0)


def test_rule_with_a_prefix_is_the_kept_page_table():
    assert attended_offsets([1, 6], [64, 0], 2, 1) == sglang_offsets([1, 6], [64, 0], 2, 1)
    # rank 1 keeps request 1 (71 tokens with its prefix) and 75 rows of request 2
    assert sglang_offsets([1, 1, 300], [64, 70, 0], 4, 1) == [0] + [71] * 75


@pytest.mark.parametrize(
    ("extend", "prefix", "cp"), [([1, 6], [0], 2), ([2], None, 0), ([-1], None, 2)]
)
def test_rule_refuses_bad_input(extend, prefix, cp):
    with pytest.raises(ValueError, match=r"extend_lens|prefix_lens|cp_size"):
        sglang_offsets(extend, prefix if prefix is not None else [0] * len(extend), cp, 0)


@pytest.fixture(scope="module")
def sglang_rows_per_request():
    from sglang.srt.layers.cp.interleave import interleave_rows_per_request

    return interleave_rows_per_request


@settings(deadline=None)
@given(extend=st.lists(st.integers(0, 20), max_size=6), cp=st.sampled_from([1, 2, 4, 8]))
def test_rows_match_sglangs_per_request_count(extend, cp, sglang_rows_per_request):
    for rank in range(cp):
        rows = rank_rows(extend, cp, rank)
        counts = [sum(b == req for b, _ in rows) for req in range(len(extend))]
        assert counts == sglang_rows_per_request(extend, rank, cp)


@pytest.mark.parametrize(
    ("kwargs", "affected"),
    [
        ({"prefill_backend": "flashmla_sparse", "kv_layout": PACKED}, True),
        ({"prefill_backend": "triton_sparse_mla", "kv_layout": PACKED}, True),
        ({"prefill_backend": "flashmla_sparse_q8", "kv_layout": BF16}, True),
        ({"prefill_backend": "flashmla_auto", "kv_layout": PACKED, "sm_major": 10}, True),
        ({"prefill_backend": "flashmla_auto", "kv_layout": PACKED, "sm_major": 9}, False),
        ({"prefill_backend": "flashmla_sparse", "kv_layout": BF16}, False),
        ({"prefill_backend": "trtllm", "kv_layout": RAW}, False),
        ({"prefill_backend": "flashmla_kv", "kv_layout": PACKED}, False),
        ({"prefill_backend": "flashmla_sparse", "kv_layout": PACKED, "cp_strategy": "zigzag"},
         False),
        ({"prefill_backend": "flashmla_sparse", "kv_layout": PACKED, "enable_prefill_cp": False},
         False),
        ({"prefill_backend": "flashmla_sparse", "kv_layout": PACKED,
          "disaggregation_mode": "decode"}, False),
    ],
)  # fmt: skip
def test_exposure_table(kwargs, affected):
    base = {"enable_prefill_cp": True, "cp_strategy": "interleave", "cp_size": 8, "sm_major": 10}
    exposure = ragged_exposure(**{**base, **kwargs})
    assert exposure.affected is affected
    assert exposure.reason


# Deployments at cp 2 on an emulated GPU: (gpu, flags, RAGGED on a fresh batch by our reading).
FP8 = ("--kv-cache-dtype", "fp8_e4m3")
DEPLOYMENTS = {
    "sm100_defaults_fp8": (env.SM100, FP8, False),  # trtllm both sides
    "sm90_defaults_fp8": (env.SM90, FP8, False),  # flashmla_kv both sides
    "sm90_defaults_bf16": (env.SM90, (), False),  # flashmla_sparse over bf16: PAGED
    "sm100_flashmla_sparse_fp8": (env.SM100, dsa.FLASHMLA_SPARSE_FP8, True),
    "sm90_flashmla_sparse_fp8": (env.SM90, (*FP8, "--dsa-prefill-backend", "flashmla_sparse"),
                                 True),
    "sm100_flashmla_auto_fp8": (env.SM100, (*FP8, "--dsa-prefill-backend", "flashmla_auto"), True),
    "sm90_flashmla_auto_fp8": (env.SM90, (*FP8, "--dsa-prefill-backend", "flashmla_auto"), False),
    "sm100_flashmla_sparse_bf16": (env.SM100, ("--kv-cache-dtype", "bfloat16",
                                               "--dsa-prefill-backend", "flashmla_sparse"), False),
}  # fmt: skip


@pytest.fixture(scope="module")
def mla(plugin):
    with pytest.MonkeyPatch.context() as mp, stand_ins.cuda_stand_ins(mp) as recorder:
        yield recorder


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_exposure_matches_the_backends_choice(name, mla):
    """The dry-run's verdict against the transform SGLang's backend builds for a fresh batch."""
    from sglang_cpkv.serve._report import build_report

    gpu, flags, ragged = DEPLOYMENTS[name]
    args = dsa.server_args(2, gpu, *flags)
    report = build_report(args, gpu)
    (run, _) = dsa.DsaPrefill(args, gpu).run(
        [dsa.Req(0, 3), dsa.Req(1, 5)], dsa.upstream_init_forward_metadata(), mla, forward=False
    )
    section = report["ragged_offsets"]
    assert (run.method == "RAGGED") is ragged, (run.method, run.impl)
    assert section["affected"] is ragged, section
    assert section["fix"] == "active (hook ragged-offsets)"
    json.dumps(report, default=str)  # the JSON report carries it


@pytest.mark.slow
def test_dry_run_text_names_the_fix(capsys, plugin):
    from sglang_cpkv.serve.cli import main

    argv = [*env.glm51_argv(), "--enable-prefill-cp", "--attn-cp-size", "8", "--cp-strategy",
            "interleave", *dsa.FLASHMLA_SPARSE_FP8]  # fmt: skip
    assert main([*argv, "--dry-run", "--gpu", "sm100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = lines.index("CP top-k offsets")
    assert lines[i + 1].startswith("  affected, fix active (hook ragged-offsets): interleave CP 8")
    assert main([*env.glm51_argv(), "--kv-cache-dtype", "fp8_e4m3", "--dry-run", "--gpu",
                 "sm100"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("CP top-k offsets") + 1] == "  not affected: prefill CP off"


@pytest.mark.slow
def test_dry_run_says_when_the_fix_is_off(capsys, plugin, monkeypatch):
    from sglang_cpkv.serve import _report

    args = dsa.server_args(2, env.SM100, *dsa.FLASHMLA_SPARSE_FP8)
    # after resolving: activate() registers every enabled hook that is missing
    monkeypatch.setattr("sglang_cpkv.plugin._registered._names", ("dsa-backends",))
    section = _report.build_report(args, env.SM100)["ragged_offsets"]
    assert section["affected"] and section["fix"].startswith("OFF (ragged-offsets in ")
