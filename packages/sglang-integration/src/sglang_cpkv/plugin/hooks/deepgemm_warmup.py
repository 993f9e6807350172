"""CP-aware DeepGEMM warmup: SGLang's own M list, capped for attention-side kernels under CP.

SGLang 0.5.23 (``layers/deep_gemm_wrapper/compile_utils.py``) JIT-warms every DeepGEMM kernel for
one M list, whatever the kernel: ``1..min(2 * chunked, 131072)`` (131,072 Ms at chunked 65,536),
or in fast mode a sample that stops near ``min(chunked, 32768)``. Under prefill CP a rank's
attention projections run at most ``deepgemm_compat.warmup.max_rank_rows`` rows, so most of the
full list is never used for them; the FFN GEMMs run on the rows all-gathered over attention CP
and need all of it.

This AROUND hook on ``_compile_deep_gemm_one_type_all(kernel_type, n, k, num_groups, m_list)``
starts from the ``m_list`` SGLang passes and, from the published server arguments of this process
(chunked prefill size, CP size and strategy, the speculative draft, fast mode) and the model's
config (``_warmup_shapes``):

* hands SGLang exactly that list when nothing shrinks (no CP, no sequence split, a draft outside
  CP, zigzag, grouped MoE kernels, and every dense ``(N, K)`` it cannot identify as one of the
  model's attention-side GEMMs);
* otherwise keeps, for those attention-side kernels, every M of it up to the per-rank cap (plus
  the cap itself when the fast list lacks it), and drops only the Ms above;
* with ``CPKV_DEEPGEMM_FAST_TO_CHUNK=1`` in fast mode (opt-in, recorded as a decision), adds
  SGLang's fast sample continued up to the chunk size.

SGLang still filters contiguous-layout Ms by alignment, sizes the buffers from ``max(m_list)``
and runs the executors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cpkv_cli.environment import CPKV_DEEPGEMM_FAST_TO_CHUNK

from sglang_cpkv.plugin._decisions import record
from sglang_cpkv.plugin.hooks._warmup_shapes import ModelShapes, model_shapes

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
    to_chunk = CPKV_DEEPGEMM_FAST_TO_CHUNK.read(env)
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


def plan(shapes: Sequence[Any], inputs: WarmupInputs, model: ModelShapes | None = None) -> Any:
    """``deepgemm_compat.warmup.plan_warmup`` for ``shapes`` under ``inputs``, from SGLang's own
    M list (this process imports sglang).

    With ``model``, each dense shape is ``cp_local`` exactly when the hook would cap it
    (``model.identify``), so the plan shows what the hook does to each ``(kernel, N, K)``.
    """
    from dataclasses import replace

    from deepgemm_compat.warmup import Rows, plan_warmup

    def as_hook_sees(s: Any) -> Any:
        local = model is not None and model.identify(s.kernel.value, s.n, s.k)[0]
        return replace(s, rows=Rows.CP_LOCAL if local else Rows.GATHERED)

    if model is not None:
        shapes = [s if s.kernel.grouped else as_hook_sees(s) for s in shapes]
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
        what: the model GEMM(s) the kernel was identified as, or why it was not.
    """

    m_list: list[int]
    changed: bool
    added: tuple[int, ...]
    reason: str
    what: str = ""


def hooked_m_list(
    kernel: str,
    n: int,
    k: int,
    m_list: list[int],
    inputs: WarmupInputs,
    shapes: Callable[[], ModelShapes] | ModelShapes | None,
) -> HookedList:
    """The M list for one DeepGEMM kernel ``(kernel, N, K)``, given the list SGLang built.

    Args:
        kernel, n, k: what SGLang compiles (``DeepGemmKernelType`` name, N, K).
        m_list: SGLang's list.
        inputs: the deployment (:func:`warmup_inputs`).
        shapes: the model's dense GEMMs, or a callable that reads them (only called when a dense
            kernel could shrink); None = unknown, nothing dense shrinks.
    """
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
    limit, what = None, ""
    if kind.grouped:
        reason = "grouped MoE: sees all-to-all re-gathered tokens, keeps the full grid"
    elif cap.cap is None:
        reason = cap.reason
    else:
        known = shapes() if callable(shapes) else shapes
        local, what = known.identify(kernel, n, k) if known else (False, "model unknown")
        limit = cap.cap if local else None
        reason = cap.reason if local else f"SGLang's list ({what})"
    out = shape_m_list(ms, kind, limit)
    if added:
        reason += f"; {FAST_TO_CHUNK_ENV}=1 added {len(added)} Ms up to {added[-1]}"
    return HookedList(out, out != list(m_list), tuple(added), reason, what)


def _process_inputs() -> WarmupInputs:
    # Read on every call (once per shape): a process may re-publish a new engine's config.
    from sglang.srt.runtime_context import get_server_args

    return warmup_inputs(get_server_args())


_SHAPES: dict[tuple[Any, ...], ModelShapes] = {}


def process_model_shapes() -> ModelShapes:
    """The running model's dense GEMMs, from this process's published server arguments (model
    config via SGLang's ``model_config_of``) and attention TP; cached per model and TP."""
    from sglang.srt.arg_groups.overrides import model_config_of, resolution_result
    from sglang.srt.runtime_context import get_parallel, get_server_args

    server_args, parallel = get_server_args(), get_parallel()
    attn_tp, tp = int(parallel.attn_tp_size), int(parallel.tp_size)
    key = (resolution_result(server_args, "model_path"), attn_tp, tp)
    if key not in _SHAPES:
        try:
            hf_config = model_config_of(server_args).hf_config
        except Exception as exc:  # never fail a warmup over it: keep SGLang's lists
            return ModelShapes(str(key[0]), note=f"cannot read the model config: {exc!r}")
        _SHAPES[key] = model_shapes(hf_config, attn_tp=attn_tp, tp=tp)
    return _SHAPES[key]


def compile_with_cp_plan(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on ``compile_utils._compile_deep_gemm_one_type_all``."""
    bound = inspect.signature(original).bind(*args, **kwargs)
    a = bound.arguments
    kernel, n, k, theirs = a["kernel_type"].name, a["n"], a["k"], a["m_list"]
    hooked = hooked_m_list(kernel, n, k, theirs, _process_inputs(), process_model_shapes)
    shape = f"{kernel} N={n} K={k} groups={a['num_groups']}"
    if hooked.changed:
        a["m_list"] = hooked.m_list
        message = (
            f"{shape} [{hooked.what}]: {len(hooked.m_list)} Ms up to {max(hooked.m_list)} "
            f"(SGLang: {len(theirs)} up to {max(theirs)})"
        )
    else:
        message = f"{shape}: SGLang's {len(theirs)} Ms up to {max(theirs, default=0)}"
    record("warmup", message, hooked.reason)
    return original(*bound.args, **bound.kwargs)
