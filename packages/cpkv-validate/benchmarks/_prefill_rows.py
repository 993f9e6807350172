"""The prefill rows ``bench_prefill.py`` records and ``report_cp_scaling.py`` reads: phases,
speed-ups over cp 1, and the merge with rows already recorded.

No torch here, so the report runs on any machine.
"""

from __future__ import annotations

from pathlib import Path

import benchkit

#: The phases a prefill layer's time is split into, in table order (``bench_prefill._PhaseTimer``).
PHASES = (
    "cpkv_ops",
    "indexer_scores",
    "topk",
    "sparse_attention",
    "projections_mlp",
    "all_gather",
)
#: cp 1 phases shorter than this (ms/layer) get no speed-up: there is next to nothing to speed up
#: (the all-gather at cp 1, say), and the ratio would be noise.
MIN_BASE_MS = 0.05


def phase_op(phase: str) -> str:
    """The row ``op`` of a phase: ``cpkv_ops_per_layer`` for the cpkv ops, else ``phase:<name>``."""
    return "cpkv_ops_per_layer" if phase == "cpkv_ops" else f"phase:{phase}"


PHASE_OPS = tuple(phase_op(p) for p in PHASES)

Key = tuple[str, int, int, str]  # (op, tokens, cp, provider)


def p50_index(rows: list[dict]) -> dict[Key, float]:
    """``(op, tokens, cp, provider) -> p50`` of the prefill rows among ``rows``."""
    return {(r["op"], r["tokens"], r["cp"], r["provider"]): r["p50"] for r in rows if "tokens" in r}


def phase_ms(p50: dict[Key, float], tokens: int, cp: int, provider: str) -> dict[str, float] | None:
    """ms/layer of each recorded phase op, plus ``other`` (the layer time outside every phase).

    Returns:
        ``{op: ms}`` in :data:`PHASE_OPS` order, then ``other``; None without a layer row.
    """
    layer = p50.get(("prefill_layer", tokens, cp, provider))
    if layer is None:
        return None
    got = {op: p50[k] for op in PHASE_OPS if (k := (op, tokens, cp, provider)) in p50}
    got["other"] = layer - sum(got.values())
    return got


def speedups(phases: dict[str, float], base: dict[str, float] | None) -> dict[str, float]:
    """Per phase, the cp 1 time over this time (phases cp 1 spent under MIN_BASE_MS on left out)."""
    base = base or {}
    return {k: base[k] / v for k, v in phases.items() if v > 0 and base.get(k, 0) >= MIN_BASE_MS}


#: Row fields naming one measurement: ``where`` (GPU model and count, or "CPU xN") beside
#: benchkit's device label, since cp 1 on one H200 and cp 2 on two are different machines here.
KEY = ("where", "op", "case", "provider")


def load_rows(path: Path) -> list[dict]:
    """The rows recorded in ``path`` (a benchkit record or an older plain list); none if absent."""
    return benchkit.read_rows(path)


def merged(recorded: list[dict], new: list[dict]) -> list[dict]:
    """The recorded rows ``new`` does not measure again (same machine, op, case and provider),
    then ``new``."""
    return benchkit.merge_rows(recorded, new, KEY)
