"""The DeepGEMM warmup hook: SGLang's M grid (run for real) against the CP-aware plan."""

from __future__ import annotations

import _sglang_env as env
import pytest
from sglang_cpkv import _decisions

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]


CP8 = ["--enable-prefill-cp", "--attn-cp-size", "8", "--cp-strategy", "interleave"]
DENSE = ("GEMM_NT_F8F8BF16", 6144, 16384, 1)  # attn.o_proj of GLM-5.1 (64 heads x 256)
CONTIG = ("GROUPED_GEMM_NT_F8F8BF16_CONTIG", 4096, 6144, 32)
MASKED = ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 4096, 6144, 32)


@pytest.mark.parametrize(
    ("extra", "dense_max"),
    [([], 131072), (CP8, 16384)],
    ids=["no-cp", "cp8"],
)
def test_warmup_plan_per_kernel_type(plugin, extra, dense_max):
    from sglang_cpkv.hooks.deepgemm_warmup import shape_ms, warmup_inputs

    sa = env.resolve(env.glm51_argv("--chunked-prefill-size", "65536", *extra), env.SM100)
    inputs = warmup_inputs(sa, env={})
    assert inputs.cp_size == (8 if extra else 1)
    dense = shape_ms(*DENSE, inputs)
    assert (len(dense.before), max(dense.before)) == (131072, 131072)  # SGLang's grid
    assert (len(dense.after), max(dense.after)) == (dense_max, dense_max)
    for kernel in (CONTIG, MASKED):  # grouped MoE GEMMs keep SGLang's grid
        entry = shape_ms(*kernel, inputs)
        assert entry.after == entry.before and max(entry.after) == 131072


def test_warmup_hook_swaps_the_m_list(plugin):
    """The installed hook hands SGLang's compile loop the plan of the published config."""
    from sglang.srt.layers.deep_gemm_wrapper.compile_utils import DeepGemmKernelType
    from sglang.srt.runtime_context import create_context, use_context
    from sglang_cpkv.hooks.deepgemm_warmup import compile_with_cp_plan

    sa = env.resolve(env.glm51_argv("--chunked-prefill-size", "65536", *CP8), env.SM100)
    calls = []

    # Stands in for SGLang's compile loop, which needs a GPU; same signature as the real one.
    def compile_all(kernel_type, n, k, num_groups, m_list):
        calls.append((kernel_type, len(m_list), max(m_list)))

    with use_context(create_context(sa, role="scheduler")):
        for kernel, n, k, g in (DENSE, CONTIG):
            compile_with_cp_plan(
                compile_all, DeepGemmKernelType[kernel], n, k, g, list(range(1, 131073))
            )
    # dense: 1..16384; grouped contiguous: SGLang's grid, multiples of the 128-row alignment
    assert calls[0][1:] == (16384, 16384) and calls[1][1:] == (1024, 131072)
    assert [d.topic for d in _decisions.decisions("warmup")] == ["warmup", "warmup"]


@pytest.fixture
def sglang_m_list(monkeypatch):
    """SGLang's own warmup M list (``compile_utils.update_deep_gemm_config``) for a config."""
    from sglang.srt.layers.deep_gemm_wrapper import compile_utils
    from sglang.srt.runtime_context import create_context, use_context

    for name in ("_BUILTIN_M_LIST", "_DO_COMPILE_ALL", "_IS_FIRST_RANK_ON_NODE", "_FAST_WARMUP"):
        monkeypatch.setattr(compile_utils, name, getattr(compile_utils, name))

    def run(sa, fast):
        compile_utils._FAST_WARMUP = fast
        with use_context(create_context(sa, role="scheduler")):
            compile_utils.update_deep_gemm_config(0)
        return list(compile_utils._BUILTIN_M_LIST)

    return run


@pytest.mark.parametrize("fast", [False, True], ids=["full", "fast"])
@pytest.mark.parametrize("extra", [[], CP8], ids=["no-cp", "cp8"])
def test_warmup_plan_against_sglangs_own_grid(plugin, sglang_m_list, fast, extra):
    """SGLang's grid ignores CP (131,072 Ms at chunked 65,536) and its fast list stops at 32,768;
    the plan shrinks dense GEMMs by CP and fills the fast list up to the chunk."""
    from sglang_cpkv.hooks.deepgemm_warmup import shape_ms, warmup_inputs

    sa = env.resolve(env.glm51_argv("--chunked-prefill-size", "65536", *extra), env.SM100)
    theirs = sglang_m_list(sa, fast)
    assert max(theirs) == (32768 if fast else 131072)
    inputs = warmup_inputs(sa, env={"SGLANG_JIT_DEEPGEMM_FAST_WARMUP": "1" if fast else "0"})
    dense, masked = shape_ms(*DENSE, inputs), shape_ms(*MASKED, inputs)
    assert list(dense.before) == theirs == list(masked.before)
    cp = 8 if extra else 1
    top = 65536 if fast else 131072  # fast: the chunk itself; full: SGLang's 2 x chunked
    assert max(masked.after) == top
    assert max(dense.after) == top // cp
    if fast:  # every M SGLang samples below the cap stays, plus the 32K-64K range
        assert set(theirs) <= set(masked.after) and 49152 in masked.after
