"""deepgemm_compat's copy of SGLang's DeepGEMM warmup M list, held equal to SGLang's function.

The reference is ``sglang.srt.layers.deep_gemm_wrapper.compile_utils.update_deep_gemm_config``
of the installed sglang 0.5.23, called for real. Only its run-time inputs are replaced, in its
module's namespace, for the duration of one call:

* ``get_schedule()``: an object whose ``chunked_prefill_size`` is the case's chunk size;
* ``get_device()``: an object whose ``base_gpu_id`` is 0 (only decides the first rank on a node);
* ``get_parallel()``: raises (0.5.23 does not read it; a release that does fails here loudly);
* ``_FAST_WARMUP``: the fast-mode switch, which SGLang reads from
  ``SGLANG_JIT_DEEPGEMM_FAST_WARMUP`` once at import.

SGLang's two modes (full, fast) are both covered, for every chunk size of the table and for
random ones from hypothesis. The run-time path (``upstream_m_list``, which runs SGLang's code
against a private globals dict) is held equal to the same reference.
"""

from __future__ import annotations

import types

import _sglang_env as env
import pytest
from deepgemm_compat.warmup import copy_m_list, resolve_m_list, upstream_m_list
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = [*env.SGLANG_IMPORT_WARNINGS]

CHUNKS = [
    1, 100, 1000, 1024, 3000, 4096, 6000, 8192, 8193, 10000, 12288, 16384, 20000, 24576, 32768,
    40000, 65536, 65537, 131072, -1, 0,
]  # fmt: skip


def _no_parallel():
    raise AssertionError("update_deep_gemm_config read get_parallel(): a new input to model")


def sglang_list(chunked: int, fast: bool) -> list[int]:
    """SGLang's own ``update_deep_gemm_config(0)`` for a chunk size and mode."""
    from sglang.srt.layers.deep_gemm_wrapper import compile_utils

    with pytest.MonkeyPatch.context() as mp:
        for name in ("_BUILTIN_M_LIST", "_DO_COMPILE_ALL", "_IS_FIRST_RANK_ON_NODE"):
            mp.setattr(compile_utils, name, getattr(compile_utils, name))
        mp.setattr(compile_utils, "_FAST_WARMUP", fast)
        schedule = types.SimpleNamespace(chunked_prefill_size=chunked)
        mp.setattr(compile_utils, "get_schedule", lambda: schedule)
        mp.setattr(compile_utils, "get_device", lambda: types.SimpleNamespace(base_gpu_id=0))
        mp.setattr(compile_utils, "get_parallel", _no_parallel)
        compile_utils.update_deep_gemm_config(0)
        return list(compile_utils._BUILTIN_M_LIST)


@pytest.mark.parametrize("fast", [False, True], ids=["full", "fast"])
@pytest.mark.parametrize("chunked", CHUNKS)
def test_copy_equals_sglang_table(chunked, fast):
    theirs = sglang_list(chunked, fast)
    assert copy_m_list(chunked, fast) == theirs
    assert upstream_m_list(chunked, fast) == theirs


@settings(max_examples=150, deadline=None, derandomize=True)
@given(chunked=st.integers(-4, 300_000), fast=st.booleans())
def test_copy_equals_sglang_random(chunked, fast):
    theirs = sglang_list(chunked, fast)
    assert copy_m_list(chunked, fast) == theirs
    assert upstream_m_list(chunked, fast) == theirs


def test_issue_examples():
    """The issue's measurements of SGLang: fast mode at chunked 12288 warms 3071 Ms up to 16368,
    and always 1..1024 (chunked 100 included)."""
    ms = sglang_list(12288, True)
    assert (len(ms), ms[-1]) == (3071, 16368)
    assert sglang_list(100, True) == list(range(1, 1025))


def test_runtime_path_leaves_sglangs_module_alone():
    from sglang.srt.layers.deep_gemm_wrapper import compile_utils

    names = ("_BUILTIN_M_LIST", "_DO_COMPILE_ALL", "_FAST_WARMUP", "get_schedule", "get_device")
    before = [getattr(compile_utils, name) for name in names]
    ms, where = resolve_m_list(65536, fast=True, source="auto")
    assert where == "sglang 0.5.23 update_deep_gemm_config" and ms[-1] == 32768
    after = [getattr(compile_utils, name) for name in names]
    assert all(a is b for a, b in zip(before, after, strict=True))
