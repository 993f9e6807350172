"""The DeepGEMM warmup hook, fed the M list SGLang's own ``update_deep_gemm_config`` builds.

SGLang's list comes from the real function under the real runtime context of a resolved
configuration; only ``compile_utils._FAST_WARMUP`` (the fast-mode switch SGLang reads from the
environment at import) is set per test. The model's shapes come from the GLM-5.1 fixture config
as SGLang parses it (``model_config_of`` of the published server arguments). The compile loop the
hook wraps needs a GPU, so a recorder with the same signature stands in for it and keeps the
``m_list`` it is handed.
"""

from __future__ import annotations

import _sglang_env as env
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin import _decisions

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

FAST_ENV = "SGLANG_JIT_DEEPGEMM_FAST_WARMUP"
TO_CHUNK_ENV = "CPKV_DEEPGEMM_FAST_TO_CHUNK"
KERNELS = {  # GLM-5.1 shapes on one rank of tp 8, attention CP 8
    "dense": ("GEMM_NT_F8F8BF16", 6144, 16384, 1),  # attn.o_proj (64 heads x 256): CP rows
    "mlp": ("GEMM_NT_F8F8BF16", 3072, 6144, 1),  # mlp.gate_up_proj at TP 8: gathered rows
    "shared": ("GEMM_NT_F8F8BF16", 6144, 2048, 1),  # replicated shared expert down_proj
    "unknown": ("GEMM_NT_F8F8BF16", 1000, 1000, 1),  # no GEMM of the model
    "contig": ("GROUPED_GEMM_NT_F8F8BF16_CONTIG", 4096, 6144, 32),
    "masked": ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 4096, 6144, 32),
}
KEEP = ("mlp", "shared", "unknown", "contig", "masked")


def cp8(strategy: str) -> list[str]:
    return ["--enable-prefill-cp", "--attn-cp-size", "8", "--cp-strategy", strategy]


@pytest.fixture(scope="module")
def resolved(plugin):
    """Resolved server arguments per argv, resolved once per module."""
    cache: dict[tuple[str, ...], object] = {}

    def get(*argv: str):
        if argv not in cache:
            cache[argv] = env.resolve(env.glm51_argv(*argv), env.SM100)
        return cache[argv]

    return get


@pytest.fixture
def run_hook(monkeypatch):
    """``run(server_args, fast)``: SGLang's own M list, then the hook on every kernel type.

    Returns ``(sglang_list, {kernel: m_list the hook handed SGLang's compile loop})``.
    """
    from sglang.srt.layers.deep_gemm_wrapper import compile_utils
    from sglang.srt.layers.deep_gemm_wrapper.compile_utils import DeepGemmKernelType
    from sglang.srt.runtime_context import create_context, use_context
    from sglang_cpkv.plugin.hooks.deepgemm_warmup import compile_with_cp_plan

    for name in ("_BUILTIN_M_LIST", "_DO_COMPILE_ALL", "_IS_FIRST_RANK_ON_NODE", "_FAST_WARMUP"):
        monkeypatch.setattr(compile_utils, name, getattr(compile_utils, name))

    def run(server_args, fast: bool):
        monkeypatch.setenv(FAST_ENV, "1" if fast else "0")
        compile_utils._FAST_WARMUP = fast
        handed: dict[str, list[int]] = {}
        _decisions.clear()
        with use_context(create_context(server_args, role="scheduler")):
            compile_utils.update_deep_gemm_config(0)
            theirs = compile_utils._BUILTIN_M_LIST
            for label, (kernel, n, k, groups) in KERNELS.items():

                def compile_all(kernel_type, n, k, num_groups, m_list, label=label):
                    handed[label] = m_list

                compile_with_cp_plan(compile_all, DeepGemmKernelType[kernel], n, k, groups, theirs)
        return theirs, handed

    return run


@pytest.mark.parametrize("fast", [False, True], ids=["full", "fast"])
@pytest.mark.parametrize("chunked", ["12288", "65536"])
def test_without_cp_sglang_gets_exactly_its_own_list(resolved, run_hook, fast, chunked):
    theirs, handed = run_hook(resolved("--chunked-prefill-size", chunked), fast)
    for label in KERNELS:
        assert handed[label] is theirs, label  # the very list object SGLang passed
    dense = _decisions.decisions("warmup")[0]
    assert dense.reason == "dense: SGLang's list (no CP)" and "SGLang's " in dense.message


@pytest.mark.parametrize("fast", [False, True], ids=["full", "fast"])
def test_interleave_cp8_caps_dense_at_the_rows_a_rank_runs(resolved, run_hook, fast):
    """Chunked 65,536: forwards up to 131,072 tokens, 131,072 / 8 = 16,384 rows a rank."""
    theirs, handed = run_hook(resolved("--chunked-prefill-size", "65536", *cp8("interleave")), fast)
    assert max(theirs) == (32768 if fast else 131072)
    assert handed["dense"] == [m for m in theirs if m <= 16384]  # 16384 is in both lists
    assert all(handed[label] is theirs for label in KEEP)
    dense, mlp, shared, unknown = _decisions.decisions("warmup")[:4]
    assert "a rank runs at most 16384 rows" in dense.reason
    assert dense.message.startswith("GEMM_NT_F8F8BF16 N=6144 K=16384 groups=1 [attn.o_proj]: ")
    assert dense.message.endswith(f"(SGLang: {len(theirs)} up to {max(theirs)})")
    assert "mlp.gate_up_proj" in mlp.reason and "more than one CP rank's rows" in mlp.reason
    assert "shared_expert.down_proj" in shared.reason
    assert "N=1000 K=1000 is not a GEMM GlmMoeDsaForCausalLM" in unknown.reason


def test_interleave_cap_covers_the_padding(resolved, run_hook):
    """Chunked 10,000, cp 8: 20,000 / 8 = 2,500 rows, padded to a multiple of 8: 2,504."""
    sa = resolved("--chunked-prefill-size", "10000", *cp8("interleave"))
    theirs, handed = run_hook(sa, False)
    assert handed["dense"] == list(range(1, 2505)) and max(theirs) == 20000


def test_zigzag_keeps_sglangs_list(resolved, run_hook):
    """A zigzag batch with one extend shorter than 16 tokens runs without CP: all its rows."""
    argv = ("--chunked-prefill-size", "65536", *cp8("zigzag"), "--moe-dense-tp-size", "1")
    theirs, handed = run_hook(resolved(*argv), False)
    assert all(handed[label] is theirs for label in KERNELS)
    assert "extend shorter than 16 tokens without CP" in _decisions.decisions("warmup")[0].reason


def test_fast_to_chunk_is_opt_in_and_recorded(resolved, run_hook, monkeypatch):
    sa = resolved("--chunked-prefill-size", "65536", *cp8("interleave"))
    theirs, handed = run_hook(sa, True)
    assert handed["masked"] is theirs and handed["mlp"] is theirs and max(theirs) == 32768
    monkeypatch.setenv(TO_CHUNK_ENV, "1")
    theirs, handed = run_hook(sa, True)
    added = sorted(set(handed["masked"]) - set(theirs))
    assert set(theirs) <= set(handed["masked"]) and added[0] > 32768 and added[-1] == 65536
    assert handed["dense"] == [m for m in theirs if m <= 16384]  # nothing added below the cap
    assert handed["mlp"] == handed["masked"]  # gathered rows: SGLang's list and the fill
    reasons = [d.reason for d in _decisions.decisions("warmup")]
    assert all(f"{TO_CHUNK_ENV}=1 added {len(added)} Ms up to 65536" in r for r in reasons)


def test_plan_reads_sglangs_own_function(resolved):
    """``plan`` (what ``cpkv-serve --dry-run`` prints) starts from SGLang's function, not a copy."""
    from deepgemm_compat.warmup import glm51_reduced_shapes
    from sglang_cpkv.plugin.hooks.deepgemm_warmup import plan, warmup_inputs

    inputs = warmup_inputs(resolved("--chunked-prefill-size", "65536", *cp8("interleave")), env={})
    assert (inputs.cp_size, inputs.cp_split, inputs.fast_to_chunk) == (8, "interleave", False)
    p = plan(glm51_reduced_shapes(), inputs)
    assert p.m_list_source == "sglang 0.5.23 update_deep_gemm_config"
    assert (p.m_max, p.dense_m_max, p.cap.rows) == (131072, 16384, 16384)


def _fixture_config(resolved, **changes):
    import copy

    from sglang.srt.arg_groups.overrides import model_config_of

    hf = copy.deepcopy(model_config_of(resolved("--chunked-prefill-size", "65536")).hf_config)
    for key, value in changes.items():
        setattr(hf, key, value)
    return hf


ATTENTION_NK = {(2624, 6144), (16384, 2048), (6144, 16384), (4096, 2048), (128, 6144)}


def test_model_shapes_of_the_glm51_fixture(resolved):
    """Computed from the config SGLang parsed: the five attention-side (N, K) at attention TP 1;
    at attention TP 8 the head-split ones follow."""
    from sglang_cpkv.plugin.hooks._warmup_shapes import model_shapes

    known = model_shapes(_fixture_config(resolved), attn_tp=1, tp=8)
    assert set(known.cp_local) == ATTENTION_NK and known.note == ""
    assert known.identify("GEMM_NT_F8F8BF16", 28672, 512) == (
        False, "attn.kv_b_proj: may run on more than one CP rank's rows",
    )  # fmt: skip
    assert not known.identify("GEMM_NT_BF16BF16F32", 6144, 16384)[0]  # not a block-FP8 kernel
    assert known.identify("GEMM_NT_F8F8BF16_BLOCK32", 6144, 16384) == (True, "attn.o_proj")
    split = model_shapes(_fixture_config(resolved), attn_tp=8, tp=8)
    assert {(8 * 256, 2048), (6144, 8 * 256)} <= set(split.cp_local)


def test_a_collision_with_an_ffn_shape_keeps_the_list(resolved):
    """intermediate_size 16384: a replicated dense MLP's down_proj is (6144, 16384), o_proj's
    kernel: the hook cannot tell them apart, so o_proj keeps SGLang's list."""
    from sglang_cpkv.plugin.hooks._warmup_shapes import model_shapes

    known = model_shapes(_fixture_config(resolved, intermediate_size=16384), attn_tp=1, tp=8)
    local, what = known.identify("GEMM_NT_F8F8BF16", 6144, 16384)
    assert not local and what.startswith("attn.o_proj shares its kernel with mlp.down_proj")


def test_a_config_without_mla_fields_caps_nothing():
    """A Llama config (transformers' own) has no MLA attention: no dense kernel is identified."""
    from sglang_cpkv.plugin.hooks._warmup_shapes import model_shapes
    from transformers import LlamaConfig

    cfg = LlamaConfig()
    known = model_shapes(cfg, attn_tp=1, tp=8)
    assert known.cp_local == {} and "model config q_lora_rank must be a positive int" in known.note
    h = cfg.hidden_size
    assert known.identify("GEMM_NT_F8F8BF16", h, h) == (False, known.note)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 40000), k=st.integers(1, 40000))
def test_random_shapes_are_capped_only_if_attention_side(resolved, n, k):
    """hooked_m_list with SGLang's own full list at chunked 65536, cp 8 interleave."""
    from sglang_cpkv.plugin.hooks._warmup_shapes import model_shapes
    from sglang_cpkv.plugin.hooks.deepgemm_warmup import hooked_m_list, warmup_inputs

    inputs = warmup_inputs(resolved("--chunked-prefill-size", "65536", *cp8("interleave")), env={})
    known = model_shapes(_fixture_config(resolved), attn_tp=1, tp=8)
    theirs = list(range(1, 131073))
    for nk in ((n, k), *ATTENTION_NK):
        out = hooked_m_list("GEMM_NT_F8F8BF16", *nk, theirs, inputs, known)
        assert out.m_list == (theirs[:16384] if nk in ATTENTION_NK else theirs), nk
