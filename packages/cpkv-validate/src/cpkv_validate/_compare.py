"""Batch-N-with-CP against batch-1-without-CP: per-request diffs, verdicts and leak sources.

Nothing here imports torch at module level: the command line (``--help``, bad flags) and the
http engine use the result types without it; only :func:`compare_rows` needs tensors.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["TOLERANCE", "Report", "RequestResult", "ScenarioResult", "compare_rows"]

# Max abs diff allowed between a request's rows at batch N (CP) and at batch 1 (no CP). The
# computation is row-wise and the top-k tie-break is deterministic, so only reduction order
# differs: float64 leaves ~1e-13, a leak moves rows by O(0.1..1).
TOLERANCE: dict[str, float] = {"float64": 1e-8, "float32": 1e-3, "bfloat16": 5e-2}


@dataclass
class RequestResult:
    """One request of one scenario.

    Attributes:
        rows: rows compared (tokens it computed at batch N, or generated tokens for http).
        max_abs_diff: largest |batch N - golden| over those rows (inf on NaN or a length change).
        first_bad: first position whose row differs beyond tolerance, or None.
        verdict: ``PASS``, ``FAIL`` (contamination: rows differ or a foreign row was read);
            http also ``SHORT`` (too few tokens compared to be evidence) and ``DRIFT`` (the
            first difference is a near-tie, not a leak; see ``_judge``).
        leak_sources: requests whose KV (or text) showed up in this one's.
        leaks: details (layer, kind, position, source) from the reference engine's audit.
        evidence: http: tokens each run generated and why it ended, e.g.
            ``{"reference": "32 tokens (length)", "batch": ...}``; None for the reference engine.
        detail: http: the outputs of every run, the compared tokens, the divergence and its
            margins, foreign markers found and the reasons for the verdict.
    """

    scenario: str
    request: str
    marker: str
    rows: int
    max_abs_diff: float
    first_bad: int | None
    verdict: str
    leak_sources: list[str] = field(default_factory=list)
    leaks: list[dict[str, object]] = field(default_factory=list)
    evidence: dict[str, str] | None = None
    detail: dict[str, object] | None = None


@dataclass
class ScenarioResult:
    """One scenario run: its requests, and the mode it ran in (None for the http engine)."""

    name: str
    description: str
    requests: list[RequestResult]
    steps: int = 0
    legacy_conflicts: int = 0  # (request, page) lookups the legacy inverse sends elsewhere
    shared_written_pages: int = 0  # pages one batch lists from >= 2 requests, written by one
    cp: int | None = None
    split: str | None = None
    allocator: str | None = None

    @property
    def ok(self) -> bool:
        """No contamination and evidence enough: every request PASS (or DRIFT, a near-tie)."""
        return all(r.verdict in ("PASS", "DRIFT") for r in self.requests)


@dataclass
class Report:
    """A whole run: its configuration, every scenario run, and its wall time."""

    config: dict[str, object]
    scenarios: list[ScenarioResult]
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.scenarios)

    def verdicts(self, verdict: str) -> list[RequestResult]:
        """The requests, over every scenario run, whose verdict is ``verdict``."""
        return [r for s in self.scenarios for r in s.requests if r.verdict == verdict]

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["ok"] = self.ok
        for s, sd in zip(self.scenarios, d["scenarios"], strict=True):
            sd["ok"] = s.ok
            for r in sd["requests"]:
                if math.isinf(r["max_abs_diff"]):
                    r["max_abs_diff"] = "inf"
        return d


def compare_rows(
    got: torch.Tensor, want: torch.Tensor, positions: torch.Tensor, tol: float
) -> tuple[float, int | None]:
    """Max abs diff of (n, d) rows and the first position beyond ``tol``.

    Returns:
        (max_abs_diff, first bad position or None); inf when shapes differ or a value is NaN.
    """
    import torch

    if got.shape != want.shape:
        return math.inf, int(positions[0]) if positions.numel() else 0
    if got.numel() == 0:
        return 0.0, None
    diff = (got.double() - want.double()).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    per_row = diff.amax(dim=-1) if diff.dim() > 1 else diff
    bad = torch.nonzero(per_row > tol).squeeze(1)
    first = int(positions[bad[0]]) if bad.numel() else None
    return float(per_row.max()), first
