"""CP-aware DeepGEMM warmup: SGLang's own M list, capped for dense kernels under CP.

SGLang 0.5.23 (``layers/deep_gemm_wrapper/compile_utils.py``) JIT-warms every DeepGEMM kernel for
one M list, whatever the kernel: ``1..min(2 * chunked, 131072)`` (131,072 Ms at chunked 65,536),
or in fast mode a sample that stops near ``min(chunked, 32768)``. Under prefill CP a rank's dense
GEMMs run at most ``deepgemm_compat.warmup.max_rank_rows`` rows, so most of the full list is
never used there.

This AROUND hook on ``_compile_deep_gemm_one_type_all(kernel_type, n, k, num_groups, m_list)``
starts from the ``m_list`` SGLang passes and, from the published server arguments of this process
(chunked prefill size, CP size and strategy, the speculative draft, fast mode):

* hands SGLang exactly that list when nothing shrinks (no CP, no sequence split, a draft outside
  CP, zigzag, grouped MoE kernels);
* otherwise keeps, for dense kernels, every M of it up to the per-rank cap (plus the cap itself
  when the fast list lacks it), and drops only the Ms above;
* with ``CPKV_DEEPGEMM_FAST_TO_CHUNK=1`` in fast mode (opt-in, recorded as a decision), adds
  SGLang's fast sample continued up to the chunk size.

SGLang still filters contiguous-layout Ms by alignment, sizes the buffers from ``max(m_list)``
and runs the executors.
"""

from __future__ import annotations

import inspect
import os
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
#: Opt-in: in fast mode, also warm SGLang's fast sample continued up to the chunk size.
FAST_TO_CHUNK_ENV = "CPKV_DEEPGEMM_FAST_TO_CHUNK"


@dataclass(frozen=True)
class WarmupInputs:
    """What the plan depends on, read from resolved server arguments.

    Attributes:
        chunked_prefill_size: tokens per prefill chunk (-1 = chunking off).
        cp_size: prefill CP ranks (1 without ``--enable-prefill-cp``).
        cp_split: ``"zigzag"``, ``"interleave"`` or ``"none"``.
        speculative_algorithm: SGLang's canonical name (``"EAGLE"``...), ``"NONE"`` without one.
        fast: ``SGLANG_JIT_DEEPGEMM_FAST_WARMUP`` is on.
        fast_to_chunk: ``CPKV_DEEPGEMM_FAST_TO_CHUNK`` is on.
    """

    chunked_prefill_size: int
    cp_size: int = 1
    cp_split: str = "none"
    speculative_algorithm: str = "NONE"
    fast: bool = False
    fast_to_chunk: bool = False

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
        env: where to read ``SGLANG_JIT_DEEPGEMM_FAST_WARMUP`` and
            ``CPKV_DEEPGEMM_FAST_TO_CHUNK``; default: the process environment (the first through
            SGLang's own reader).
    """
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.environ import envs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    fast = (
        envs.SGLANG_JIT_DEEPGEMM_FAST_WARMUP.get() if env is None else _env_bool(env.get(FAST_ENV))
    )
    to_chunk = _env_bool((os.environ if env is None else env).get(FAST_TO_CHUNK_ENV))
    cp_on = bool(resolution_result(server_args, "enable_prefill_cp"))
    algo = SpeculativeAlgorithm.from_string(resolution_result(server_args, "speculative_algorithm"))
    return WarmupInputs(
        chunked_prefill_size=int(resolution_result(server_args, "chunked_prefill_size")),
        cp_size=int(resolution_result(server_args, "attn_cp_size")) if cp_on else 1,
        cp_split=(resolution_result(server_args, "cp_strategy") or "none") if cp_on else "none",
        speculative_algorithm=getattr(algo, "name", str(algo)).upper(),
        fast=bool(fast),
        fast_to_chunk=to_chunk,
    )


def cp_setup(inputs: WarmupInputs) -> Any:
    """``deepgemm_compat.warmup.CPSetup`` for ``inputs``."""
    from deepgemm_compat.warmup import CPSetup

    return CPSetup(
        inputs.cp_size, inputs.cp_split, draft=inputs.draft, draft_cp=inputs.draft_under_cp
    )


def plan(shapes: Any, inputs: WarmupInputs) -> Any:
    """``deepgemm_compat.warmup.plan_warmup`` for ``shapes`` under ``inputs``, from SGLang's own
    M list (this process imports sglang)."""
    from deepgemm_compat.warmup import plan_warmup

    return plan_warmup(
        list(shapes),
        inputs.chunked_prefill_size,
        cp_setup(inputs),
        fast=inputs.fast,
        fast_to_chunk=inputs.fast_to_chunk,
        source="sglang",
    )


@dataclass(frozen=True)
class HookedList:
    """What the hook hands SGLang for one kernel.

    Attributes:
        m_list: the list to warm (SGLang's own when ``changed`` is False).
        changed: whether it differs from SGLang's.
        added: Ms ``fast_to_chunk`` added.
        reason: why, for the decision log.
    """

    m_list: list[int]
    changed: bool
    added: tuple[int, ...]
    reason: str


def hooked_m_list(kernel: str, m_list: list[int], inputs: WarmupInputs) -> HookedList:
    """The M list for one DeepGEMM kernel type, given the list SGLang built (``m_list``)."""
    from deepgemm_compat.warmup import (
        KernelType,
        dense_cap,
        fast_to_chunk_ms,
        sglang_m_max,
        shape_m_list,
    )

    if kernel not in KernelType.__members__ or not m_list:
        why = f"kernel type {kernel} unknown to deepgemm_compat: SGLang's list kept"
        return HookedList(list(m_list), False, (), why)
    kind = KernelType(kernel)
    added: list[int] = []
    if inputs.fast and inputs.fast_to_chunk:
        added = fast_to_chunk_ms(inputs.chunked_prefill_size, m_list)
    ms = sorted([*m_list, *added]) if added else list(m_list)
    # the largest forward: the top of SGLang's full-mode list, from SGLang's own function
    forward = sglang_m_max(inputs.chunked_prefill_size, source="sglang")
    cap = dense_cap(forward, max(ms), cp_setup(inputs))
    out = shape_m_list(ms, kind, cap.cap)
    grouped = "grouped MoE: sees all-to-all re-gathered tokens, keeps the full grid"
    reason = grouped if kind.grouped else cap.reason
    if added:
        reason += f"; {FAST_TO_CHUNK_ENV}=1 added {len(added)} Ms up to {added[-1]}"
    return HookedList(out, out != list(m_list), tuple(added), reason)


def _process_inputs() -> WarmupInputs:
    # Read on every call (once per shape): a process may re-publish a new engine's config.
    from sglang.srt.runtime_context import get_server_args

    return warmup_inputs(get_server_args())


def compile_with_cp_plan(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on ``compile_utils._compile_deep_gemm_one_type_all``."""
    bound = inspect.signature(original).bind(*args, **kwargs)
    a = bound.arguments
    kernel, theirs = a["kernel_type"].name, a["m_list"]
    hooked = hooked_m_list(kernel, theirs, _process_inputs())
    shape = f"{kernel} N={a['n']} K={a['k']} groups={a['num_groups']}"
    if hooked.changed:
        a["m_list"] = hooked.m_list
        message = (
            f"{shape}: {len(hooked.m_list)} Ms up to {max(hooked.m_list)} "
            f"(SGLang: {len(theirs)} up to {max(theirs)})"
        )
    else:
        message = f"{shape}: SGLang's {len(theirs)} Ms up to {max(theirs, default=0)}"
    record("warmup", message, hooked.reason)
    return original(*bound.args, **bound.kwargs)
