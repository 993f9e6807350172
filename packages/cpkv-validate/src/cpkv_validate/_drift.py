"""The comparison of two greedy runs of one prompt, and the rule that tells drift from a leak.

Two rules (the report says which it used):

- ``exact``: every compared token must be equal. Used where the server says it runs SGLang's
  deterministic inference (``enable_deterministic_inference``: the batch cannot change the
  arithmetic), with ``--drift-epsilon 0``, and where the server gives no top logprobs (the drift
  rule cannot apply).
- ``margin``: at the first differing position, if the two runs' top-two logprob gaps there add
  up to at most ``epsilon``, the difference is numeric drift: a batch changes the reduction order,
  and on a near-tie (random weights have many) that flips the greedy choice. Positions after it
  are not compared (after a flip everything differs). Why the sum: the reference picked ``a``
  and the other run ``b`` from the same context, so the gap ``logp(a) - logp(b)`` fell from at
  least the reference's margin to at most minus the other's; rounding had to move it by both
  margins together. A near-tie in one run alone does not make a flip numeric: a request that
  reads another's KV at a position where the reference is tied (0.0 nats) while the batch is
  sure (0.97) is a leak, and the served planted fault showed just that (2026-12-08). Where only
  one run's margin is known, that one is the sum (the weaker test; the request's reason says
  so). The argument takes each run's token as its top one (greedy) and the top two logprobs as
  exact; collapsed text keys (two tokens that decode alike) can only widen a margin, toward FAIL.

Pure functions over recorded tokens and margins, so the rule is tested without a server.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["EXACT", "MARGIN", "Comparison", "compare_runs", "top2_margin"]

EXACT, MARGIN = "exact", "margin"


def top2_margin(top: object) -> float | None:
    """The gap between the two largest logprobs of one position's top entries, or None when it
    holds fewer than two numbers: OpenAI's ``{token text: logprob}`` dict, or SGLang's
    ``[[logprob, token id, text], ...]`` list (one entry per id: texts may repeat)."""
    if isinstance(top, dict):
        raw = list(top.values())
    elif isinstance(top, list):
        raw = [e[0] for e in top if isinstance(e, list | tuple) and e]
    else:
        return None
    values = sorted(
        (float(v) for v in raw if isinstance(v, int | float) and not isinstance(v, bool)),
        reverse=True,
    )
    return values[0] - values[1] if len(values) >= 2 else None


@dataclass(frozen=True)
class Comparison:
    """Two runs of one prompt within the compared window.

    Attributes:
        first: the first position (within the window) whose tokens differ or one run lacks;
            None when the runs agree.
        compared: positions compared: all the window holds when they agree, those before
            ``first`` on drift, every position either run has in the window on a difference.
        differing: positions in the window that differ or one run lacks (0 on drift: after a
            flip nothing is compared).
        drift: the difference at ``first`` is a near-tie (rule ``margin``).
        margins: the top-two logprob gap at ``first`` in (reference, other) run, where known.
    """

    first: int | None
    compared: int
    differing: int
    drift: bool = False
    margins: tuple[float | None, float | None] = (None, None)

    @property
    def differs(self) -> bool:
        """A difference that is not drift."""
        return self.first is not None and not self.drift


def compare_runs(
    reference: Sequence[Hashable],
    other: Sequence[Hashable],
    window: int,
    *,
    rule: str = EXACT,
    epsilon: float = 0.0,
    reference_margins: Sequence[float | None] | None = None,
    other_margins: Sequence[float | None] | None = None,
) -> Comparison:
    """``other`` against ``reference`` over their first ``window`` tokens, under ``rule``."""
    ref, got = list(reference[:window]), list(other[:window])
    n = max(len(ref), len(got))
    bad = [i for i in range(n) if i >= len(ref) or i >= len(got) or ref[i] != got[i]]
    if not bad:
        return Comparison(None, n, 0)
    first = bad[0]
    margins = (_at(reference_margins, first), _at(other_margins, first))
    known = [m for m in margins if m is not None]
    if rule == MARGIN and known and sum(known) <= epsilon:
        return Comparison(first, first, 0, True, margins)
    return Comparison(first, n, len(bad), False, margins)


def _at(margins: Sequence[float | None] | None, i: int) -> float | None:
    return margins[i] if margins is not None and i < len(margins) else None
