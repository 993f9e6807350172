"""The CP-aware warmup planner on GLM-5.1 shapes and edge cases."""

from __future__ import annotations

import pytest
from deepgemm_compat.warmup import (
    GLM51,
    CPSetup,
    GemmShape,
    KernelType,
    Rows,
    compress,
    dsa_attention_shapes,
    dsa_ffn_shapes,
    glm51_reduced_shapes,
    glm51_shapes,
    plan_warmup,
    run_warmup,
    sglang_m_list,
    sglang_m_max,
)
from hypothesis import given, settings
from hypothesis import strategies as st

DENSE, CONTIG, MASKED = (
    KernelType.GEMM_NT_F8F8BF16,
    KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG,
    KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED,
)


def by_name(plan):
    return {e.shape.name: e for e in plan.entries}


@pytest.mark.parametrize(
    ("chunked", "m_max"),
    [
        (-1, 65536),
        (0, 65536),
        (1, 16384),
        (4096, 16384),
        (8192, 16384),
        (8193, 16386),
        (10000, 20000),
        (16384, 32768),
        (65536, 131072),
        (131072, 131072),
    ],
)
def test_m_max_follows_sglang(chunked, m_max):
    assert sglang_m_max(chunked) == m_max


def test_fast_list_matches_sglangs_comment():
    ms = sglang_m_list(16384, fast=True)
    assert len(ms) == 3072 and ms[-1] == 16384  # SGLang: "Totally ... = 3072 kernels"
    assert ms[1023:1027] == [1024, 1026, 1028, 1030]
    assert max(sglang_m_list(131072, fast=True)) == 32768


@pytest.mark.parametrize(
    ("chunked", "count", "last"),
    [(12288, 3071, 16368), (100, 1024, 1024), (1, 1024, 1024), (-1, 3072, 16384)],
)
def test_fast_list_is_not_cut_at_the_bound(chunked, count, last):
    """SGLang always warms 1..1024 and runs each stepped range to its end (12288: the
    issue's measurement of SGLang's own function, 3071 Ms up to 16368)."""
    ms = sglang_m_list(chunked, fast=True)
    assert (len(ms), ms[-1]) == (count, last) and ms[:1024] == list(range(1, 1025))
    if chunked > 1024:
        assert chunked in ms


def test_m_list_source_falls_back_to_the_copy(monkeypatch):
    import sys

    from deepgemm_compat import _mlist
    from deepgemm_compat.warmup import resolve_m_list

    monkeypatch.setitem(sys.modules, "sglang", None)  # makes `import sglang...` fail
    ms, where = resolve_m_list(8192, source="auto")
    assert ms == list(range(1, 16385)) and where.startswith("copy of sglang 0.5.23 (SGLang not")
    with pytest.raises(ImportError, match="cannot import sglang"):
        resolve_m_list(8192, source="sglang")
    monkeypatch.setattr(_mlist, "entry_points", lambda group: [])  # no SGLang plugin installed
    ms, where = resolve_m_list(8192, source="auto")
    assert ms == list(range(1, 16385)) and "install sglang-integration" in where
    with pytest.raises(ImportError, match="no run-time source of SGLang's list"):
        resolve_m_list(8192, source="sglang")
    monkeypatch.setenv("DEEPGEMM_COMPAT_M_LIST", "upstream")
    with pytest.raises(ValueError, match=r"M_LIST='upstream': expected auto, sglang or copy"):
        resolve_m_list(8192)


def test_glm51_shapes_from_config():
    shapes = {s.name: s for s in glm51_shapes()}
    assert (shapes["attn.q_b_proj"].n, shapes["attn.q_b_proj"].k) == (64 * 256, 2048)
    assert (shapes["attn.o_proj"].n, shapes["attn.o_proj"].k) == (6144, 64 * 256)
    assert (shapes["attn.fused_qkv_a_proj"].n, shapes["attn.fused_qkv_a_proj"].k) == (
        2048 + 512 + 64,
        6144,
    )
    assert (shapes["indexer.wq_b"].n, shapes["indexer.wk"].n) == (32 * 128, 128)
    assert (
        shapes["moe.gate_up_proj"].groups == 256 // 8
        and shapes["moe.gate_up_proj"].kernel is CONTIG
    )
    assert GLM51["hidden_size"] == 6144
    assert {s.name for s in glm51_shapes(attn_tp=8)} == set(shapes)
    assert {s.n for s in glm51_shapes(attn_tp=8) if s.name == "attn.q_b_proj"} == {8 * 256}


# (name, N, K, rows) at tp 8, attention TP 1, dense MLP TP 8, replicated shared expert (DeepEP)
GLM51_TABLE = [
    ("attn.fused_qkv_a_proj", 2048 + 512 + 64, 6144, "cp_local"),
    ("attn.q_b_proj", 64 * (192 + 64), 2048, "cp_local"),
    ("attn.kv_b_proj", 64 * (192 + 256), 512, "gathered"),
    ("attn.o_proj", 6144, 64 * 256, "cp_local"),
    ("indexer.wq_b", 32 * 128, 2048, "cp_local"),
    ("indexer.wk", 128, 6144, "cp_local"),
    ("mlp.gate_up_proj", 2 * 12288 // 8, 6144, "gathered"),
    ("mlp.down_proj", 6144, 12288 // 8, "gathered"),
    ("shared_expert.gate_up_proj", 2 * 2048, 6144, "gathered"),
    ("shared_expert.down_proj", 6144, 2048, "gathered"),
]


def test_glm51_rows_table():
    dense = [(s.name, s.n, s.k, s.rows.value) for s in glm51_shapes() if s.kernel is DENSE]
    assert dense == GLM51_TABLE
    shared = {s.name: (s.n, s.k) for s in glm51_shapes(dense_tp=1, shared_tp=8)}
    assert shared["mlp.down_proj"] == (6144, 12288)
    assert shared["shared_expert.gate_up_proj"] == (2 * 2048 // 8, 6144)


def test_attention_without_indexer_and_missing_fields():
    mla = {k: v for k, v in GLM51.items() if not k.startswith("index_")}
    assert [s.name for s in dsa_attention_shapes(mla)] == [
        "attn.fused_qkv_a_proj", "attn.q_b_proj", "attn.kv_b_proj", "attn.o_proj",
    ]  # fmt: skip
    no_q_lora = {**GLM51, "q_lora_rank": None}  # DeepSeek-V2-Lite style: no q_lora
    with pytest.raises(ValueError, match="model config q_lora_rank must be a positive int"):
        dsa_attention_shapes(no_q_lora)
    with pytest.raises(ValueError, match="model config intermediate_size must be a positive int"):
        dsa_ffn_shapes({"hidden_size": 6144})


def test_headline_chunked_65536_cp8():
    plan = plan_warmup(glm51_shapes(), 65536, CPSetup(8, "interleave"))
    assert (plan.m_max, plan.dense_m_max) == (131072, 16384)
    for e in plan.entries:
        if e.shape.kernel is DENSE and e.shape.rows is Rows.CP_LOCAL:
            assert (len(e.before), len(e.after)) == (131072, 16384)
            assert e.after == tuple(range(1, 16385)) and "a rank runs at most 16384" in e.reason
        elif e.shape.kernel is DENSE:  # dense MLP, shared expert, kv_b_proj: gathered rows
            assert e.after == e.before and len(e.before) == 131072
            assert e.reason.startswith("gathered: ")
        else:  # grouped MoE keeps the full grid (filtered by the 128 alignment)
            assert e.after == e.before and len(e.before) == 131072 // 128
    assert (plan.before_total, plan.after_total) == (1312768, 5 * 16384 + 5 * 131072 + 2048)


def test_a_kernel_shared_with_a_gathered_shape_keeps_the_list():
    """One kernel serves every shape of its (kernel, N, K, groups): it shrinks only if all do."""
    local = GemmShape(DENSE, 6144, 2048, 1, "a", Rows.CP_LOCAL)
    gathered = GemmShape(DENSE, 6144, 2048, 1, "b", Rows.GATHERED)
    for shapes in ([local, gathered], [gathered, local]):
        (e,) = plan_warmup(shapes, 65536, CPSetup(8, "interleave")).entries
        assert e.shape.rows is Rows.GATHERED and e.after == e.before
    (e,) = plan_warmup([local, local], 65536, CPSetup(8, "interleave")).entries
    assert e.shape.name == "a+a" and len(e.after) == 16384


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    chunked=st.sampled_from([4096, 8192, 10000, 16384, 65536, -1]),
    cp=st.integers(1, 16),
    split=st.sampled_from(["interleave", "zigzag", "none"]),
    fast=st.booleans(),
    tps=st.sampled_from([(1, 8, 1), (2, 8, 8), (8, 1, 1), (1, 1, 8)]),
)
def test_only_cp_local_dense_shapes_lose_ms(chunked, cp, split, fast, tps):
    attn_tp, dense_tp, shared_tp = tps
    shapes = glm51_shapes(attn_tp=attn_tp, dense_tp=dense_tp, shared_tp=shared_tp, moe="both")
    plan = plan_warmup(shapes, chunked, CPSetup(cp, split), fast=fast)
    for e in plan.entries:
        if e.shape.kernel.grouped or e.shape.rows is Rows.GATHERED:
            assert e.after == e.before, e.shape.name
        else:
            assert set(e.before) - set(e.after) == {m for m in e.before if m > plan.dense_m_max}


def test_interleave_shrinks_zigzag_does_not():
    """Zigzag runs a batch with any extend shorter than 2 * cp without CP: all its rows."""
    plan = plan_warmup(glm51_shapes(), 65536, CPSetup(4, "interleave"))
    assert plan.dense_m_max == 131072 // 4 and plan.cap.rows == 131072 // 4
    plan = plan_warmup(glm51_shapes(), 65536, CPSetup(4, "zigzag"))
    assert plan.dense_m_max == 131072 and plan.after_total == plan.before_total
    assert plan.cap.rows == 131072 and plan.cap.cap is None
    dense = by_name(plan)["attn.o_proj"]
    assert "extend shorter than 8 tokens without CP" in dense.reason


@pytest.mark.parametrize(
    ("cp", "why"),
    [
        (CPSetup(8, "none"), "CP does not split the sequence"),
        (CPSetup(1, "zigzag"), "no CP"),
        (CPSetup(8, "interleave", draft=True), "draft model runs outside CP"),
    ],
)
def test_no_shrink_cases(cp, why):
    plan = plan_warmup(glm51_shapes(), 65536, cp)
    assert plan.dense_m_max == 131072 and plan.after_total == plan.before_total
    assert all(why in e.reason for e in plan.entries if e.shape.kernel is DENSE)


def test_draft_under_cp_shrinks():
    plan = plan_warmup(glm51_shapes(), 65536, CPSetup(8, "interleave", draft=True, draft_cp=True))
    assert plan.dense_m_max == 16384 and len(by_name(plan)["attn.o_proj"].after) == 16384


@pytest.mark.parametrize(
    ("chunked", "cp", "dense"),
    [
        (8192, 8, 2048),
        (4096, 16, 2048),
        (16384, 32, 2048),
        (65536, 64, 2048),
        (65536, 3, 43692),  # ceil(131072 / 3) = 43691, rounded up to a multiple of 3
        (10000, 8, 2504),  # 20000 / 8 = 2500, rounded up to a multiple of 8 (the case)
    ],
)
def test_floor_and_rounding(chunked, cp, dense):
    assert plan_warmup(glm51_shapes(), chunked, CPSetup(cp, "interleave")).dense_m_max == dense


def test_floor_never_exceeds_m_max():
    shape = GemmShape(DENSE, 256, 256, rows=Rows.CP_LOCAL)
    plan = plan_warmup([shape], 8192, CPSetup(2, "interleave"), floor=100000)
    assert plan.dense_m_max == 16384 and plan.after_total == plan.before_total


def test_fast_mode_keeps_every_sglang_m_below_the_cap_and_adds_the_cap():
    # forwards up to 20000 tokens at cp 3: ceil(20000 / 3) = 6667, rounded up to 6669; the fast
    # list steps by 8 there, so 6669 is not in it; it ends at 16368 (8192..16383 step 16)
    plan = plan_warmup(glm51_shapes(), 10000, CPSetup(3, "interleave"), fast=True)
    assert (plan.m_max, plan.dense_m_max) == (16368, 6669)
    dense = by_name(plan)["attn.o_proj"]
    assert 6669 not in dense.before and dense.after[-1] == 6669
    assert list(dense.after[:-1]) == [m for m in dense.before if m <= 6669]


def test_no_cp_keeps_sglangs_list_exactly():
    for fast in (False, True):
        plan = plan_warmup(glm51_shapes(moe="both"), 12288, fast=fast)
        assert all(e.after == e.before for e in plan.entries)


def test_masked_moe_keeps_every_m_and_contig_filters_alignment():
    plan = plan_warmup(glm51_shapes(moe="both"), 16384, CPSetup(8, "zigzag"), mk_alignment=64)
    kinds = {(e.shape.name, e.shape.kernel): e for e in plan.entries}
    assert len(kinds[("moe.gate_up_proj", MASKED)].after) == 32768
    assert len(kinds[("moe.gate_up_proj", CONTIG)].after) == 32768 // 64


def test_reduced_set():
    names = [s.name for s in glm51_reduced_shapes()]
    assert names == ["indexer.wq_b", "shared_expert.down_proj", "moe.gate_up_proj"]


def test_compress_runs():
    assert compress((1, 2, 3, 5, 7, 9, 16)) == [(1, 3, 1), (5, 9, 2), (16, 16, 1)]
    assert compress(()) == []


def test_to_dict_is_compact():
    d = plan_warmup(glm51_reduced_shapes(), 65536, CPSetup(8, "interleave")).to_dict()
    assert d["entries"][0]["after"] == {"count": 16384, "m_max": 16384, "runs": [(1, 16384, 1)]}
    assert d["cp"] == {"size": 8, "split": "interleave", "draft": False, "draft_cp": False}
    assert (d["m_list_source"], d["forward_tokens"], d["rank_rows"]) == (
        "copy of sglang 0.5.23", 131072, 16384,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: CPSetup(0), "CP size must be a positive int"),
        (lambda: CPSetup(8, "ring"), "'ring' is not a valid CPSplit"),
        (lambda: CPSetup(8, "zigzag", draft_cp=True), "draft_cp=True needs draft=True"),
        (lambda: GemmShape(DENSE, 0, 128), "n must be a positive int"),
        (lambda: GemmShape(DENSE, 128, 128, groups=4), "dense kernel .* takes groups=1"),
        (lambda: GemmShape("NOT_A_KERNEL", 1, 1), "'NOT_A_KERNEL' is not a valid KernelType"),
        (lambda: plan_warmup([], 8192), "at least one GemmShape"),
        (
            lambda: plan_warmup(glm51_reduced_shapes(), 8192.5),
            "chunked_prefill_size must be an int",
        ),
        (
            lambda: plan_warmup(glm51_reduced_shapes(), 8192, floor=0),
            "floor must be >= 1",
        ),
        (
            lambda: glm51_shapes(attn_tp=3),
            r"attn_tp=3 must be >= 1 and divide num_attention_heads \(64\)",
        ),
        (lambda: glm51_shapes(ep=7), r"ep=7 must be >= 1 and divide n_routed_experts \(256\)"),
        (lambda: glm51_shapes(shared_tp=3), "shared_tp=3 must be >= 1 and divide the shared"),
        (lambda: GemmShape(DENSE, 1, 1, rows="local"), "'local' is not a valid Rows"),
        (lambda: glm51_shapes(moe="dense"), "moe must be"),
        (
            lambda: run_warmup(plan_warmup(glm51_reduced_shapes(), 8192), grid="cp"),
            "grid must be 'after' or 'before'",
        ),
        (
            lambda: run_warmup(plan_warmup(glm51_reduced_shapes(), 8192), progress_every_s=0),
            "progress_every_s must be > 0",
        ),
    ],
)
def test_bad_input_messages(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_fast_to_chunk_samples_past_sglangs_32k_cap():
    shapes, cp8 = glm51_shapes(), CPSetup(8, "interleave")
    plain = plan_warmup(shapes, 65536, cp8, fast=True)
    filled = plan_warmup(shapes, 65536, cp8, fast=True, fast_to_chunk=True)
    assert plain.m_max == filled.m_max == 32768  # SGLang's own fast list is unchanged
    assert plain.fast_to_chunk == () and filled.fast_to_chunk[-1] == 65536
    assert min(filled.fast_to_chunk) > 32768  # SGLang's sample already holds everything below
    for a, b in zip(plain.entries, filled.entries, strict=True):
        assert a.before == b.before and set(a.after) <= set(b.after)
        full = b.shape.kernel.grouped or b.shape.rows is Rows.GATHERED
        assert max(b.after) == (65536 if full else 16384)
        assert max(a.after) == (32768 if full else 16384)
        assert ("fast_to_chunk added" in b.reason) and "fast_to_chunk" not in a.reason
    # nothing to fill when the chunk fits SGLang's list, or outside fast mode
    small = plan_warmup(shapes, 8192, cp8, fast=True, fast_to_chunk=True)
    assert small == plan_warmup(shapes, 8192, cp8, fast=True)
    full = plan_warmup(shapes, 65536, cp8, fast_to_chunk=True)
    assert full == plan_warmup(shapes, 65536, cp8)
