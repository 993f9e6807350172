"""CP-aware DeepGEMM warmup plan: which M values to JIT-compile for each GEMM shape.

DeepGEMM compiles one kernel per (kernel type, N, K, groups, M-dependent config) and
SGLang warms a full M grid up to ``m_max``, derived from ``chunked_prefill_size``
(``sglang/srt/layers/deep_gemm_wrapper/compile_utils.py``, 0.5.23):

* ``chunked < 1``: ``m_max = 65536``; ``chunked <= 8192``: ``16384``;
  else ``min(2 * chunked, 131072)``. Full mode warms every M in ``1..m_max``.
* fast mode (``SGLANG_JIT_DEEPGEMM_FAST_WARMUP``): 1..1024, then step 2 up to 2048, step 4
  up to 4096, ... below ``min(chunked, 32768)``, plus that bound itself.
* grouped contiguous kernels keep only Ms divisible by the layout alignment.

Under CP with an in-sequence split (zigzag, interleave) a rank's dense GEMMs see about
``m / cp`` rows, so their grid stops at ``max(ceil(m_max / cp), 2048)``. Grouped MoE
GEMMs see the all-to-all re-gathered tokens and keep the full grid. A draft model that
runs outside CP sees full-length chunks with the same shapes, so then nothing shrinks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class KernelType(StrEnum):
    """SGLang's DeepGemmKernelType names."""

    GEMM_NT_F8F8BF16 = "GEMM_NT_F8F8BF16"
    GEMM_NT_F8F8BF16_BLOCK32 = "GEMM_NT_F8F8BF16_BLOCK32"
    GEMM_NT_BF16BF16F32 = "GEMM_NT_BF16BF16F32"
    GROUPED_GEMM_NT_F8F8BF16_CONTIG = "GROUPED_GEMM_NT_F8F8BF16_CONTIG"
    GROUPED_GEMM_NT_F8F8BF16_MASKED = "GROUPED_GEMM_NT_F8F8BF16_MASKED"
    GROUPED_GEMM_NT_BF16_CONTIG = "GROUPED_GEMM_NT_BF16_CONTIG"
    GROUPED_GEMM_NT_BF16_MASKED = "GROUPED_GEMM_NT_BF16_MASKED"

    @property
    def grouped(self) -> bool:
        return self.name.startswith("GROUPED")

    @property
    def contiguous(self) -> bool:
        return self.name.endswith("_CONTIG")


class CPSplit(StrEnum):
    """How CP distributes a sequence: ``zigzag``/``interleave`` split it, ``none`` does not."""

    ZIGZAG = "zigzag"
    INTERLEAVE = "interleave"
    NONE = "none"


@dataclass(frozen=True)
class GemmShape:
    """One GEMM family DeepGEMM compiles for: ``(M, K) x (groups, N, K)``."""

    kernel: KernelType
    n: int
    k: int
    groups: int = 1
    name: str = ""

    def __post_init__(self) -> None:
        kernel = KernelType(self.kernel)
        object.__setattr__(self, "kernel", kernel)
        for label, value in (("n", self.n), ("k", self.k), ("groups", self.groups)):
            if not _is_int(value) or value < 1:
                raise ValueError(
                    f"GemmShape {self.name or kernel.value}: {label} must be a positive int, "
                    f"got {value!r}"
                )
        if not kernel.grouped and self.groups != 1:
            raise ValueError(
                f"GemmShape {self.name or kernel.value}: dense kernel {kernel.value} "
                f"takes groups=1, got {self.groups}"
            )

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.kernel.value, self.n, self.k, self.groups)


@dataclass(frozen=True)
class CPSetup:
    """The context-parallel configuration of the prefill ranks."""

    size: int = 1
    split: CPSplit = CPSplit.NONE
    draft: bool = False
    draft_cp: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", CPSplit(self.split))
        if not _is_int(self.size) or self.size < 1:
            raise ValueError(f"CP size must be a positive int, got {self.size!r}")
        if self.draft_cp and not self.draft:
            raise ValueError(
                "draft_cp=True needs draft=True (there is no draft model to run under CP)"
            )

    @property
    def splits_sequence(self) -> bool:
        return self.size > 1 and self.split is not CPSplit.NONE


def sglang_m_max(chunked_prefill_size: int) -> int:
    """The largest M SGLang warms for a ``chunked_prefill_size`` (-1 = chunking off)."""
    if not _is_int(chunked_prefill_size):
        raise ValueError(f"chunked_prefill_size must be an int, got {chunked_prefill_size!r}")
    if chunked_prefill_size < 1:
        return 64 * 1024
    if chunked_prefill_size > 8192:
        return min(128 * 1024, chunked_prefill_size * 2)
    return 16 * 1024


def sglang_m_list(chunked_prefill_size: int, fast: bool = False) -> list[int]:
    """SGLang's warmup M list (full or fast mode), before any kernel-specific filter."""
    if not fast:
        return list(range(1, sglang_m_max(chunked_prefill_size) + 1))
    bound = min(chunked_prefill_size, 32 * 1024) if chunked_prefill_size >= 1 else 16 * 1024
    return fast_m_list(bound)


def fast_m_list(bound: int) -> list[int]:
    """SGLang's fast-mode sample up to ``bound``: 1..1024, then step 2 below 2048, step 4 below
    4096, ..., plus ``bound`` itself."""
    ms = list(range(1, min(bound, 1024) + 1))
    next_m, step = 1024, 2
    while next_m < bound:
        ms += range(next_m, min(2 * next_m, bound), step)
        next_m, step = next_m * 2, step * 2
    ms.append(bound)
    return sorted(set(ms))


def _for_kernel(ms: list[int], kernel: KernelType, mk_alignment: int) -> tuple[int, ...]:
    if kernel.contiguous:
        return tuple(m for m in ms if m % mk_alignment == 0)
    return tuple(ms)


def compress(ms: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """Sorted Ms as ``(first, last, step)`` runs, for printing and JSON."""
    runs: list[tuple[int, int, int]] = []
    for m in ms:
        if runs:
            first, last, step = runs[-1]
            if first == last and m > last:
                runs[-1] = (first, m, m - last)
                continue
            if m - last == step:
                runs[-1] = (first, m, step)
                continue
        runs.append((m, m, 1))
    return runs


@dataclass(frozen=True)
class PlanEntry:
    """The M grid of one shape before and after the CP shrink, and why."""

    shape: GemmShape
    before: tuple[int, ...]
    after: tuple[int, ...]
    reason: str

    def to_dict(self) -> dict:
        def grid(ms: tuple[int, ...]) -> dict:
            return {"count": len(ms), "m_max": max(ms, default=0), "runs": compress(ms)}

        return {
            "name": self.shape.name,
            "kernel": self.shape.kernel.value,
            "n": self.shape.n,
            "k": self.shape.k,
            "groups": self.shape.groups,
            "before": grid(self.before),
            "after": grid(self.after),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class WarmupPlan:
    """The whole plan; ``entries`` has one row per distinct (kernel, N, K, groups)."""

    chunked_prefill_size: int
    fast: bool
    cp: CPSetup
    m_max: int
    dense_m_max: int
    entries: tuple[PlanEntry, ...] = field(default_factory=tuple)

    @property
    def before_total(self) -> int:
        return sum(len(e.before) for e in self.entries)

    @property
    def after_total(self) -> int:
        return sum(len(e.after) for e in self.entries)

    def to_dict(self) -> dict:
        cp = self.cp
        return {
            "chunked_prefill_size": self.chunked_prefill_size,
            "fast": self.fast,
            "cp": {
                "size": cp.size,
                "split": cp.split.value,
                "draft": cp.draft,
                "draft_cp": cp.draft_cp,
            },
            "m_max": self.m_max,
            "dense_m_max": self.dense_m_max,
            "before_total": self.before_total,
            "after_total": self.after_total,
            "entries": [e.to_dict() for e in self.entries],
        }


def plan_warmup(
    shapes: list[GemmShape] | tuple[GemmShape, ...],
    chunked_prefill_size: int,
    cp: CPSetup | None = None,
    *,
    fast: bool = False,
    fast_to_chunk: bool = False,
    floor: int = 2048,
    mk_alignment: int = 128,
) -> WarmupPlan:
    """Plan the M grid per shape.

    Args:
        shapes: the GEMMs the model runs on this rank; shapes with the same
            (kernel, N, K, groups) compile the same kernels and are merged.
        chunked_prefill_size: SGLang's ``--chunked-prefill-size`` (-1 = off).
        cp: the CP setup; ``None`` = no CP.
        fast: model ``SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1``.
        fast_to_chunk: in fast mode, sample on up to ``chunked_prefill_size`` where SGLang's
            fast list stops at 32,768 (a 65,536-token chunk would otherwise compile its
            32K-64K kernels while serving).
        floor: the smallest dense ``m_max`` after shrinking (2048).
        mk_alignment: ``get_mk_alignment_for_contiguous_layout()`` (128 on SM90/SM100).
    """
    cp = cp or CPSetup()
    if not shapes:
        raise ValueError("plan_warmup needs at least one GemmShape")
    if floor < 1 or mk_alignment < 1:
        raise ValueError(f"floor and mk_alignment must be >= 1, got {floor}, {mk_alignment}")
    base = sglang_m_list(chunked_prefill_size, fast)
    m_max = base[-1]
    # fast_to_chunk: the caps apply to the fast sample run on up to the chunk, not to `base`.
    extend = fast and fast_to_chunk and chunked_prefill_size > m_max
    target = chunked_prefill_size if extend else m_max
    sample = fast_m_list(target) if extend else base
    shrink = cp.splits_sequence and (not cp.draft or cp.draft_cp)
    dense_cap = min(target, max(floor, math.ceil(target / cp.size))) if shrink else target
    if shrink:
        dense_why = f"dense: CP {cp.size} {cp.split.value} gives ~m/{cp.size} rows per rank"
    elif cp.splits_sequence:
        dense_why = "dense: no shrink (a draft model runs outside CP and sees full chunks)"
    elif cp.size > 1:
        dense_why = "dense: no shrink (CP does not split the sequence)"
    else:
        dense_why = "dense: no shrink (no CP)"
    grouped_why = "grouped MoE: sees all-to-all re-gathered tokens, keeps the full grid"
    merged: dict[tuple, GemmShape] = {}
    for s in shapes:
        prev = merged.get(s.key)
        name = s.name if prev is None or not prev.name else f"{prev.name}+{s.name}"
        merged[s.key] = GemmShape(s.kernel, s.n, s.k, s.groups, name)
    entries = []
    for s in merged.values():
        before = _for_kernel(base, s.kernel, mk_alignment)
        cap = target if s.kernel.grouped else dense_cap
        if cap == m_max and not extend:  # the sample is `base`, nothing cut
            after = before
        else:
            ms = [m for m in sample if m <= cap]
            if ms[-1] != cap:
                ms.append(cap)
            after = _for_kernel(ms, s.kernel, mk_alignment)
        reason = grouped_why if s.kernel.grouped else dense_why
        if extend:
            reason += f"; fast mode sampled up to {cap} (SGLang's fast list stops at {m_max})"
        entries.append(PlanEntry(s, before, after, reason))
    return WarmupPlan(chunked_prefill_size, fast, cp, m_max, dense_cap, tuple(entries))
