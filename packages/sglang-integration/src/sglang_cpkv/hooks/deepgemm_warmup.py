"""CP-aware DeepGEMM warmup: SGLang's M grid replaced by the ``deepgemm_compat`` plan.

SGLang 0.5.23 (``layers/deep_gemm_wrapper/compile_utils.py``) JIT-compiles every DeepGEMM kernel
for one M list, whatever the kernel: ``1..min(2 * chunked, 131072)`` (131,072 Ms at chunked
65,536), or in fast mode a sample that stops at ``min(chunked, 32768)``, which leaves the Ms of a
65,536-token chunk above 32K to compile while serving. Under prefill CP a rank's dense GEMMs see
about ``M / cp`` rows, so most of the full grid is never used.

This AROUND hook on ``_compile_deep_gemm_one_type_all(kernel_type, n, k, num_groups, m_list)``
swaps ``m_list`` for ``deepgemm_compat.warmup.plan_warmup``'s grid for that shape, computed from
the published server arguments of this process (chunked prefill size, CP size and split, the
speculative draft, fast mode). In fast mode the plan keeps SGLang's geometric sample but
continues it up to the Ms a chunk really reaches (:func:`_fill_fast_gap`). SGLang still filters
contiguous-layout Ms by alignment, sizes the buffers from ``max(m_list)`` and runs the executors.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from sglang_cpkv._decisions import record

#: Draft algorithms that run in the target's layout, i.e. under prefill CP (GLM/DeepSeek NextN
#: drafts have no ``draft_parallel_spec``; SGLang's legacy policy keeps EAGLE in the target
#: layout and moves EAGLE3/DFLASH/DSpark to a single group without CP).
_DRAFT_UNDER_CP = frozenset({"EAGLE"})
#: Algorithms without a draft model.
_NO_DRAFT = frozenset({"NONE", "NGRAM"})
FAST_ENV = "SGLANG_JIT_DEEPGEMM_FAST_WARMUP"


@dataclass(frozen=True)
class WarmupInputs:
    """What the plan depends on, read from resolved server arguments.

    Attributes:
        chunked_prefill_size: tokens per prefill chunk (-1 = chunking off).
        cp_size: prefill CP ranks (1 without ``--enable-prefill-cp``).
        cp_split: ``"zigzag"``, ``"interleave"`` or ``"none"``.
        speculative_algorithm: SGLang's canonical name (``"EAGLE"``...), ``"NONE"`` without one.
        fast: ``SGLANG_JIT_DEEPGEMM_FAST_WARMUP`` is on.
    """

    chunked_prefill_size: int
    cp_size: int = 1
    cp_split: str = "none"
    speculative_algorithm: str = "NONE"
    fast: bool = False

    @property
    def draft(self) -> bool:
        return self.speculative_algorithm not in _NO_DRAFT

    @property
    def draft_under_cp(self) -> bool:
        return self.draft and self.speculative_algorithm in _DRAFT_UNDER_CP


def _env_bool(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def warmup_inputs(server_args: Any, env: dict[str, str] | None = None) -> WarmupInputs:
    """Read :class:`WarmupInputs` from a resolved (or published) ``ServerArgs`` record.

    Args:
        server_args: the record.
        env: where to read ``SGLANG_JIT_DEEPGEMM_FAST_WARMUP``; default: SGLang's own reader
            of the process environment.
    """
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.environ import envs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    fast = (
        envs.SGLANG_JIT_DEEPGEMM_FAST_WARMUP.get() if env is None else _env_bool(env.get(FAST_ENV))
    )
    cp_on = bool(resolution_result(server_args, "enable_prefill_cp"))
    algo = SpeculativeAlgorithm.from_string(resolution_result(server_args, "speculative_algorithm"))
    return WarmupInputs(
        chunked_prefill_size=int(resolution_result(server_args, "chunked_prefill_size")),
        cp_size=int(resolution_result(server_args, "attn_cp_size")) if cp_on else 1,
        cp_split=(resolution_result(server_args, "cp_strategy") or "none") if cp_on else "none",
        speculative_algorithm=getattr(algo, "name", str(algo)).upper(),
        fast=bool(fast),
    )


def cp_setup(inputs: WarmupInputs) -> Any:
    """``deepgemm_compat.warmup.CPSetup`` for ``inputs``."""
    from deepgemm_compat.warmup import CPSetup

    return CPSetup(
        inputs.cp_size, inputs.cp_split, draft=inputs.draft, draft_cp=inputs.draft_under_cp
    )


def plan(shapes: Any, inputs: WarmupInputs) -> Any:
    """``deepgemm_compat.warmup.plan_warmup`` for ``shapes`` under ``inputs``; in fast mode the
    sample runs on to the chunk size (SGLang's fast list stops at 32,768)."""
    from deepgemm_compat.warmup import plan_warmup

    return plan_warmup(
        list(shapes),
        inputs.chunked_prefill_size,
        cp_setup(inputs),
        fast=inputs.fast,
        fast_to_chunk=True,
    )


def shape_ms(kernel: str, n: int, k: int, groups: int, inputs: WarmupInputs) -> Any:
    """The planned entry (``before``/``after`` Ms, ``reason``) of one DeepGEMM shape."""
    from deepgemm_compat.warmup import GemmShape, KernelType

    kind = KernelType(kernel)
    shape = GemmShape(kind, n, k, groups if kind.grouped else 1, kernel)
    return plan([shape], inputs).entries[0]


def _process_inputs() -> WarmupInputs:
    # Read on every call (once per shape): a process may re-publish a new engine's config.
    from sglang.srt.runtime_context import get_server_args

    return warmup_inputs(get_server_args())


def compile_with_cp_plan(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on ``compile_utils._compile_deep_gemm_one_type_all``."""
    bound = inspect.signature(original).bind(*args, **kwargs)
    a = bound.arguments
    kernel = a["kernel_type"].name
    entry = shape_ms(kernel, a["n"], a["k"], a["num_groups"], _process_inputs())
    a["m_list"] = list(entry.after)
    record(
        "warmup",
        f"{kernel} N={a['n']} K={a['k']} groups={a['num_groups']}: {len(entry.after)} Ms up to "
        f"{max(entry.after, default=0)} (SGLang: {len(entry.before)} up to "
        f"{max(entry.before, default=0)})",
        entry.reason,
    )
    return original(*bound.args, **bound.kwargs)
