"""The DeepGEMM warmup hook, fed the M list SGLang's own ``update_deep_gemm_config`` builds.

SGLang's list comes from the real function under the real runtime context of a resolved
configuration; only ``compile_utils._FAST_WARMUP`` (the fast-mode switch SGLang reads from the
environment at import) is set per test. The compile loop the hook wraps needs a GPU, so a recorder
with the same signature stands in for it and keeps the ``m_list`` it is handed.
"""

from __future__ import annotations

import _sglang_env as env
import pytest
from sglang_cpkv import _decisions

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

FAST_ENV = "SGLANG_JIT_DEEPGEMM_FAST_WARMUP"
TO_CHUNK_ENV = "CPKV_DEEPGEMM_FAST_TO_CHUNK"
KERNELS = {  # GLM-5.1 shapes: attn.o_proj (64 heads x 256), the EP-8 MoE up-projection
    "dense": ("GEMM_NT_F8F8BF16", 6144, 16384, 1),
    "contig": ("GROUPED_GEMM_NT_F8F8BF16_CONTIG", 4096, 6144, 32),
    "masked": ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 4096, 6144, 32),
}


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
    from sglang_cpkv.hooks.deepgemm_warmup import compile_with_cp_plan

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
    assert handed["contig"] is theirs and handed["masked"] is theirs
    dense = _decisions.decisions("warmup")[0]
    assert "a rank runs at most 16384 rows" in dense.reason
    assert dense.message.endswith(f"(SGLang: {len(theirs)} up to {max(theirs)})")


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
    assert handed["masked"] is theirs and max(theirs) == 32768
    monkeypatch.setenv(TO_CHUNK_ENV, "1")
    theirs, handed = run_hook(sa, True)
    added = sorted(set(handed["masked"]) - set(theirs))
    assert set(theirs) <= set(handed["masked"]) and added[0] > 32768 and added[-1] == 65536
    assert handed["dense"] == [m for m in theirs if m <= 16384]  # nothing added below the cap
    reasons = [d.reason for d in _decisions.decisions("warmup")]
    assert all(f"{TO_CHUNK_ENV}=1 added {len(added)} Ms up to 65536" in r for r in reasons)


def test_plan_reads_sglangs_own_function(resolved):
    """``plan`` (what ``cpkv-serve --dry-run`` prints) starts from SGLang's function, not a copy."""
    from deepgemm_compat.warmup import glm51_reduced_shapes
    from sglang_cpkv.hooks.deepgemm_warmup import plan, warmup_inputs

    inputs = warmup_inputs(resolved("--chunked-prefill-size", "65536", *cp8("interleave")), env={})
    assert (inputs.cp_size, inputs.cp_split, inputs.fast_to_chunk) == (8, "interleave", False)
    p = plan(glm51_reduced_shapes(), inputs)
    assert p.m_list_source == "sglang 0.5.23 update_deep_gemm_config"
    assert (p.m_max, p.dense_m_max, p.cap.rows) == (131072, 16384, 16384)
