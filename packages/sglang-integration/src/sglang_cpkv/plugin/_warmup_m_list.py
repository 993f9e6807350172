"""SGLang's DeepGEMM warmup M list, computed by SGLang's own code, for ``deepgemm_compat``.

Nothing in this package imports it: it is the entry point ``sglang = "sglang_cpkv.plugin.
_warmup_m_list:upstream_m_list"`` of group ``deepgemm_compat.m_list_sources`` in the package's
``pyproject.toml``, so that ``deepgemm_compat`` reads SGLang's list at run time (when the
``deepgemm-warmup`` hook or ``cpkv-serve --dry-run`` plans the warmup) without importing ``sglang``
itself.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["upstream_m_list"]

UPSTREAM = "sglang.srt.layers.deep_gemm_wrapper.compile_utils.update_deep_gemm_config"


def _refuse(name: str) -> Callable[[], Any]:
    def lookup() -> Any:
        raise RuntimeError(
            f"{UPSTREAM} now calls {name}(); sglang_cpkv supplies only get_schedule and "
            f"get_device. Teach sglang_cpkv.plugin._warmup_m_list the new input, or set "
            f"DEEPGEMM_COMPAT_M_LIST=copy"
        )

    return lookup


def upstream_m_list(chunked_prefill_size: int, fast: bool = False) -> list[int]:
    """SGLang's own M list for ``chunked_prefill_size`` and mode.

    Runs the bytecode of ``update_deep_gemm_config`` against a private copy of its module's
    globals in which only these inputs differ: ``get_schedule()`` (its
    ``chunked_prefill_size``), ``get_device()`` (``base_gpu_id``, only used to pick the first
    rank on a node), ``get_parallel()`` (refused: 0.5.23 does not read it) and
    ``_FAST_WARMUP`` (the fast-mode switch SGLang reads from the environment at import). The
    function's ``global`` writes land in that copy, so SGLang's module is left untouched.

    Raises:
        RuntimeError: the function reads a runtime input this module does not supply.
    """
    from sglang.srt.layers.deep_gemm_wrapper import compile_utils

    fn = compile_utils.update_deep_gemm_config
    env = dict(vars(compile_utils))
    env["get_schedule"] = lambda: types.SimpleNamespace(chunked_prefill_size=chunked_prefill_size)
    env["get_device"] = lambda: types.SimpleNamespace(base_gpu_id=0)
    env["get_parallel"] = _refuse("get_parallel")
    env["_FAST_WARMUP"] = bool(fast)
    types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)(0)
    return list(env["_BUILTIN_M_LIST"])
