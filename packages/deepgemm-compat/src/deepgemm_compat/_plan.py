"""CP-aware DeepGEMM warmup plan: which Ms to warm for each GEMM shape.

DeepGEMM compiles one kernel per (kernel type, N, K, groups, M-dependent config). SGLang warms
one M list for every kernel (:mod:`deepgemm_compat._mlist`; grouped contiguous kernels keep the
Ms divisible by the layout alignment). The plan starts from that list and changes it only where
it must:

* **no shrink** (no CP, CP without a sequence split, or a draft model outside CP that sees
  whole chunks): every shape keeps SGLang's list exactly.
* **shrink**: dense kernels of ``cp_local`` shapes (:class:`~deepgemm_compat._shapes.Rows`:
  the attention side) stop at the most rows a rank can run, ``max_rank_rows(m, cp, split)`` for
  forwards of up to ``m`` = SGLang's full-mode ``m_max`` tokens (the largest forward SGLang's
  own warmup assumes), but never below ``floor``. Every M of SGLang's list up to that cap stays;
  in fast mode the cap itself is added, as SGLang adds its own bound. Under zigzag the cap is
  ``m`` (a batch with one short extend runs without CP), so nothing shrinks. ``gathered`` shapes
  (dense MLP, shared expert: SGLang 0.5.23 all-gathers the FFN input over attention CP) and
  grouped MoE kernels (all-to-all re-gathered tokens) keep SGLang's list. Shapes that share a
  kernel (same kernel type, N, K, groups) shrink only if every one of them is ``cp_local``.
* the bound ``m``: SGLang's scheduler keeps a prefill batch's extend tokens (mixed decode tokens
  included) within ``chunked_prefill_size`` when chunking is on; ``max_prefill_tokens`` bounds it
  only with chunking off, and then not the first request; PP dynamic chunking may reach
  ``max(max_prefill_tokens, 1.25 * chunked)``. ``m_max`` (``2 * chunked`` up to 131,072) covers
  these in the usual setups at about twice the chunk, and is what SGLang itself warms for.
* ``fast_to_chunk`` (opt-in, fast mode): add SGLang's fast sample continued up to the chunk
  size, for the Ms a 65,536-token chunk reaches above SGLang's 32,768 bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from deepgemm_compat._bounds import check_plan_inputs
from deepgemm_compat._cp_rows import max_rank_rows
from deepgemm_compat._mlist import fast_sample, resolve_m_list
from deepgemm_compat._shapes import CPSetup, CPSplit, GemmShape, KernelType, Rows


@dataclass(frozen=True)
class DenseCap:
    """Where dense kernels stop, and why.

    Attributes:
        forward_tokens: the largest forward assumed (SGLang's full-mode ``m_max``).
        rows: the most rows a rank runs under CP (``max_rank_rows``); None without a shrink.
        cap: the last M dense kernels warm; None when SGLang's list is kept whole.
        reason: one line for logs and reports.
    """

    forward_tokens: int
    rows: int | None
    cap: int | None
    reason: str


def dense_cap(forward_tokens: int, top: int, cp: CPSetup, floor: int = 2048) -> DenseCap:
    """The dense cap for forwards of up to ``forward_tokens`` and an M list ending at ``top``."""
    if not cp.splits_sequence:
        why = "CP does not split the sequence" if cp.size > 1 else "no CP"
        return DenseCap(forward_tokens, None, None, f"dense: SGLang's list ({why})")
    if cp.draft and not cp.draft_cp:
        why = "dense: SGLang's list (a draft model runs outside CP and sees full chunks)"
        return DenseCap(forward_tokens, None, None, why)
    rows = max_rank_rows(forward_tokens, cp.size, cp.split.value)
    cap = max(rows, floor)
    where = f"CP {cp.size} {cp.split.value}, forwards up to {forward_tokens} tokens"
    if cap >= top:
        if cp.split is CPSplit.ZIGZAG:
            why = (
                f"dense: SGLang's list (zigzag runs a batch with an extend shorter than "
                f"{2 * cp.size} tokens without CP, so a rank can run all {rows} rows)"
            )
        else:
            why = f"dense: SGLang's list (a rank runs up to {rows} rows: {where})"
        return DenseCap(forward_tokens, rows, None, why)
    floor_note = f", floor {floor}" if floor > rows else ""
    why = f"dense: a rank runs at most {rows} rows ({where}); warm Ms up to {cap}{floor_note}"
    return DenseCap(forward_tokens, rows, cap, why)


def shape_m_list(ms: Sequence[int], kernel: KernelType, cap: int | None) -> list[int]:
    """The M list one kernel warms, before SGLang's contiguous-layout filter.

    Args:
        ms: SGLang's list (plus any ``fast_to_chunk`` Ms), ascending as SGLang builds it.
        kernel: the kernel type; grouped kernels keep ``ms``.
        cap: the dense cap, None to keep ``ms``.
    """
    ms = list(ms)
    if kernel.grouped or cap is None or cap >= max(ms):
        return ms
    kept = [m for m in ms if m <= cap]
    if cap not in kept:
        kept.append(cap)  # fast mode: warm the largest M a rank runs, as SGLang warms its bound
    return kept


GROUPED_WHY = "grouped MoE: sees all-to-all re-gathered tokens, keeps the full grid"
GATHERED_WHY = (
    "gathered: rows not bounded by one CP rank's shard (the FFN input is all-gathered over "
    "attention CP; kv_b_proj projects KV rows), keeps SGLang's list"
)


def shape_reason(shape: GemmShape, cap: DenseCap) -> str:
    """Why a shape warms what it warms: grouped, ``gathered`` under a shrink, or the cap's own
    reason (which also says why nothing shrinks)."""
    if shape.kernel.grouped:
        return GROUPED_WHY
    if cap.cap is not None and shape.rows is not Rows.CP_LOCAL:
        return GATHERED_WHY
    return cap.reason


def fast_to_chunk_ms(chunked_prefill_size: int, ms: Sequence[int]) -> list[int]:
    """Ms SGLang's fast sample would add if it ran on up to the chunk size (not in ``ms``)."""
    if chunked_prefill_size < 1:
        return []
    return sorted(set(fast_sample(chunked_prefill_size)) - set(ms))


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
    """The M grid of one shape as SGLang warms it (``before``) and as planned (``after``)."""

    shape: GemmShape
    before: tuple[int, ...]
    after: tuple[int, ...]
    reason: str

    def to_dict(self) -> dict:
        def grid(ms: tuple[int, ...]) -> dict:
            return {"count": len(ms), "m_max": max(ms, default=0), "runs": compress(ms)}

        s = self.shape
        return {
            "name": s.name, "kernel": s.kernel.value, "n": s.n, "k": s.k, "groups": s.groups,
            "rows": s.rows.value, "before": grid(self.before), "after": grid(self.after),
            "reason": self.reason,
        }  # fmt: skip


@dataclass(frozen=True)
class WarmupPlan:
    """The whole plan; ``entries`` has one row per distinct (kernel, N, K, groups).

    ``m_max`` is the largest M of SGLang's list, ``dense_m_max`` the largest a ``cp_local`` dense
    kernel warms (``gathered`` ones warm up to ``m_max``), ``m_list_source`` where SGLang's list
    came from, ``fast_to_chunk`` the Ms that option added (empty when off or nothing to add).
    """

    chunked_prefill_size: int
    fast: bool
    cp: CPSetup
    m_max: int
    dense_m_max: int
    cap: DenseCap
    m_list_source: str
    fast_to_chunk: tuple[int, ...] = ()
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
            "cp": {"size": cp.size, "split": cp.split.value, "draft": cp.draft,
                   "draft_cp": cp.draft_cp},
            "m_list_source": self.m_list_source,
            "m_max": self.m_max,
            "forward_tokens": self.cap.forward_tokens,
            "rank_rows": self.cap.rows,
            "dense_m_max": self.dense_m_max,
            "fast_to_chunk": {"count": len(self.fast_to_chunk),
                              "runs": compress(self.fast_to_chunk)},
            "before_total": self.before_total,
            "after_total": self.after_total,
            "entries": [e.to_dict() for e in self.entries],
        }  # fmt: skip


def plan_warmup(
    shapes: Sequence[GemmShape],
    chunked_prefill_size: int,
    cp: CPSetup | None = None,
    *,
    fast: bool = False,
    fast_to_chunk: bool = False,
    floor: int = 2048,
    mk_alignment: int = 128,
    source: str | None = None,
) -> WarmupPlan:
    """Plan the M grid per shape.

    Args:
        shapes: the GEMMs the model runs on this rank; shapes with the same
            (kernel, N, K, groups) compile the same kernels and are merged.
        chunked_prefill_size: SGLang's ``--chunked-prefill-size`` (-1 = off).
        cp: the CP setup; ``None`` = no CP.
        fast: SGLang's fast warmup (``SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1``).
        fast_to_chunk: in fast mode, also warm SGLang's fast sample continued up to
            ``chunked_prefill_size`` (SGLang's stops at 32,768). Off by default.
        floor: the smallest dense cap: a margin (not derived) for forwards CP does not split,
            such as decode and target verify, whose M is the batch's token count.
        mk_alignment: ``get_mk_alignment_for_contiguous_layout()`` (128 on SM90/SM100).
        source: where SGLang's list comes from: ``"auto"``, ``"sglang"`` or ``"copy"``
            (see :func:`deepgemm_compat.warmup.resolve_m_list`).

    Raises:
        InputError: an input out of its bound (``deepgemm_compat._bounds``: chunked -1 or
            1..2**31-1, CP size <= 72, at most 4096 shapes and 64 distinct kernels, dimensions,
            floor and alignment in range), before anything is built.
    """
    check_plan_inputs(shapes, chunked_prefill_size, cp, floor, mk_alignment)
    cp = cp or CPSetup()
    if not shapes:
        raise ValueError("plan_warmup needs at least one GemmShape")
    if floor < 1 or mk_alignment < 1:
        raise ValueError(f"floor and mk_alignment must be >= 1, got {floor}, {mk_alignment}")
    full, where = resolve_m_list(chunked_prefill_size, False, source)
    base = resolve_m_list(chunked_prefill_size, True, source)[0] if fast else full
    added = fast_to_chunk_ms(chunked_prefill_size, base) if fast and fast_to_chunk else []
    ms = sorted([*base, *added])
    cap = dense_cap(full[-1], ms[-1], cp, floor)
    merged: dict[tuple, GemmShape] = {}
    for s in shapes:
        prev = merged.get(s.key)
        name = s.name if prev is None or not prev.name else f"{prev.name}+{s.name}"
        # one kernel serves every shape of its key: it shrinks only if all are cp-local
        rows = s.rows if prev is None or prev.rows is s.rows else Rows.GATHERED
        merged[s.key] = GemmShape(s.kernel, s.n, s.k, s.groups, name, rows)
    fill_why = f"; fast_to_chunk added {len(added)} Ms up to {chunked_prefill_size}"
    entries = []
    for s in merged.values():
        local = not s.kernel.grouped and s.rows is Rows.CP_LOCAL
        after = shape_m_list(ms, s.kernel, cap.cap if local else None)
        reason = shape_reason(s, cap) + (fill_why if added else "")
        entries.append(
            PlanEntry(
                s,
                _for_kernel(base, s.kernel, mk_alignment),
                _for_kernel(after, s.kernel, mk_alignment),
                reason,
            )
        )
    dense_top = ms[-1] if cap.cap is None else cap.cap
    return WarmupPlan(
        chunked_prefill_size, fast, cp, base[-1], dense_top, cap, where, tuple(added),
        tuple(entries),
    )  # fmt: skip
