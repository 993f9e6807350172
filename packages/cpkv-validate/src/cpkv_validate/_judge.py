"""One request's verdict from its three runs: reference before, batch, reference after.

In order of precedence:

- ``FAIL`` (contamination, exit 1): an output of any run holds another request's marker
  (``_markers``; whatever the reference shows); or the batch differs from the reference beyond
  drift (``_drift``); or the reference after the batch differs from the one before beyond drift
  (the server changed under load: the batch's traffic reached a later request alone).
- ``SHORT`` (exit 2, not enough evidence): fewer than ``min_compared`` tokens compared.
- ``DRIFT``: the first difference is a near-tie; the tokens before it matched. Not exit 1.
- ``PASS``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._client import Completion
from ._compare import RequestResult
from ._drift import EXACT, Comparison, compare_runs
from ._markers import foreign_markers
from ._progress import evidence_text

__all__ = ["RUNS", "SCENARIO", "SHORT", "Rule", "judge"]

SCENARIO = "http_shared_prefix"
SHORT = "SHORT"
RUNS = ("reference", "batch", "reference_after")


@dataclass(frozen=True)
class Rule:
    """How runs are compared: the first ``window`` tokens, under rule ``kind`` (``exact`` or
    ``margin`` with ``epsilon``), and at least ``min_compared`` of them per request."""

    window: int
    min_compared: int
    kind: str = EXACT
    epsilon: float = 0.0

    def compare(self, reference: Completion, other: Completion) -> Comparison:
        return compare_runs(
            reference.tokens,
            other.tokens,
            self.window,
            rule=self.kind,
            epsilon=self.epsilon,
            reference_margins=reference.margins,
            other_margins=other.margins,
        )


def judge(
    i: int,
    names: list[str],
    markers: list[str],
    pieces: list[set[str]],
    runs: dict[str, list[Completion]],
    rule: Rule,
) -> RequestResult:
    """Request ``i``'s result; ``runs`` maps each of :data:`RUNS` to every request's run."""
    mine = {k: runs[k][i] for k in RUNS}
    reasons: list[str] = []
    found = []
    for k in RUNS:
        for f in foreign_markers(mine[k].text, i, pieces):
            found.append({"run": k, "source": names[f.source], "piece": f.piece, "text": f.context})
            reasons.append(f"the {_SAID[k]} output holds {names[f.source]}'s marker: {f.context!r}")
    main = rule.compare(mine["reference"], mine["batch"])
    again = rule.compare(mine["reference"], mine["reference_after"])
    for k, c in (("batch", main), ("reference_after", again)):
        if c.first is not None:
            reasons.append(_difference(_SAID[k], c))
    sources = list(dict.fromkeys(f["source"] for f in found))
    if main.differs and not sources:
        sources = _continues(i, names, mine["batch"].tokens, runs["reference"], main.first)
    if found or main.differs or again.differs:
        verdict = "FAIL"
    elif main.compared < rule.min_compared:
        verdict = SHORT
        reasons.append(f"{main.compared} tokens compared, fewer than {rule.min_compared}")
    else:
        verdict = "DRIFT" if main.drift or again.drift else "PASS"
    n = main.compared
    compared = {"reference": mine["reference"].tokens[:n], "batch": mine["batch"].tokens[:n]}
    return RequestResult(
        scenario=SCENARIO,
        request=names[i],
        marker=markers[i],
        rows=main.compared,
        max_abs_diff=float(main.differing),
        first_bad=main.first,
        verdict=verdict,
        leak_sources=sources,
        evidence={k: evidence_text(mine[k]) for k in RUNS},
        detail={
            "outputs": {k: mine[k].text for k in RUNS},
            # every generated token (ids from /generate): texts that decode alike may differ
            "generated": {k: mine[k].tokens for k in RUNS},
            "compared_tokens": compared,
            "tokens": {k: len(mine[k].tokens) for k in RUNS},
            "usage_completion_tokens": {k: mine[k].usage for k in RUNS},
            "finish_reason": {k: mine[k].finish_reason for k in RUNS},
            "divergence": _divergence(main),
            "reference_change": _divergence(again),
            "foreign_markers": found,
            "reasons": reasons,
        },
    )


_SAID = {"reference": "reference", "batch": "batch", "reference_after": "reference after the batch"}


def _difference(what: str, c: Comparison) -> str:
    ref, other = (f"{m:.3g}" if m is not None else "unknown" for m in c.margins)
    text = (
        f"the {what} differs from the reference at token {c.first} (top-two logprob gap there: "
        f"{ref} in the reference, {other} in the {what})"
    )
    if c.drift:
        alone = (
            " (judged on one run's gap alone: the other's is unknown)" if None in c.margins else ""
        )
        return f"{text}: a near-tie, drift{alone}; not compared after it"
    if what != "batch":
        return f"{text}: the server changed under load"
    return text


def _divergence(c: Comparison) -> dict[str, object] | None:
    if c.first is None:
        return None
    ref, other = c.margins
    return {"position": c.first, "drift": c.drift, "margin_reference": ref, "margin_other": other}


def _continues(
    i: int, names: list[str], got: list[str], golden: list[Completion], first: int | None
) -> list[str]:
    """Requests whose reference output the diverged tokens continue (three in a row)."""
    tail = got[first : (first or 0) + 3]
    if first is None or len(tail) < 3:
        return []
    return [
        names[j]
        for j, g in enumerate(golden)
        if j != i and any(g.tokens[k : k + 3] == tail for k in range(len(g.tokens)))
    ]
