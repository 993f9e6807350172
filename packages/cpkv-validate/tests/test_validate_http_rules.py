"""The http engine's rules as pure functions over recorded runs (no server, CPU only).

- markers: what identifies a request's marker in an output (the marker, its tag, 6-character
  pieces of the tag no other marker shares), and that a request's own marker is no finding;
- the drift rule: a recorded near-tie is drift, a wide margin a leak, exact equality where the
  rule is ``exact``; a foreign marker is FAIL even on a near-tie;
- the overlap count from request intervals, and a run without overlap: not a batch test.
"""

from __future__ import annotations

import pytest
from cpkv_validate import make_prompts
from cpkv_validate._batch import max_in_flight
from cpkv_validate._cli_http import http_status
from cpkv_validate._client import Completion
from cpkv_validate._compare import Report, RequestResult, ScenarioResult
from cpkv_validate._drift import EXACT, MARGIN, compare_runs, top2_margin
from cpkv_validate._judge import Rule, judge
from cpkv_validate._markers import foreign_markers, marker_pieces
from cpkv_validate._report_http import http_summary

MARKERS = ["MARK00x8ac5", "MARK01x25e2", "MARK02x5eb4"]
PIECES = marker_pieces(MARKERS)


def test_prompts_share_a_prefix_and_carry_distinct_markers():
    prefix, prompts = make_prompts(5, seed=1)
    markers = [mk for _, mk, _ in prompts]
    assert len(set(markers)) == 5 and all(mk.isascii() and mk.isalnum() for mk in markers)
    for i, (_, mk, text) in enumerate(prompts):
        assert text.startswith(prefix + f" Request {i} ")
        assert all(other not in text for other in markers if other != mk)
        assert not foreign_markers(text, i, marker_pieces(markers))  # nothing but its own


def test_the_prefix_has_the_words_asked_for():
    assert len(make_prompts(2, seed=1)[0].split()) == 200  # the default, _limits.PREFIX_WORDS
    prefix, prompts = make_prompts(2, seed=1, prefix_words=600)
    assert len(prefix.split()) == 600 and all(t.startswith(prefix + " ") for _, _, t in prompts)


@pytest.mark.parametrize(
    ("text", "piece"),
    [("t1 MARK00x8ac5 t2", "MARK00x8ac5"), ("t1 00x8ac5", "00x8ac5")],
    ids=["marker", "tag"],
)
def test_a_marker_is_found_whole_or_by_its_tag(text, piece):
    assert [(f.source, f.piece) for f in foreign_markers(text, 1, PIECES)] == [(0, piece)]


def test_a_piece_of_six_characters_is_enough():
    """A leak cut short by --max-tokens (``MARK00x8ac``), or starting mid-marker (``0x8ac5``)."""
    assert [f.source for f in foreign_markers(" t9 MARK00x8ac", 2, PIECES)] == [0]
    assert [f.source for f in foreign_markers("0x8ac5 t1", 2, PIECES)] == [0]
    assert foreign_markers(" t9 MARK00x8a", 2, PIECES) == []  # 5 characters of the tag: no


def test_a_piece_two_markers_share_names_neither():
    pieces = marker_pieces(["MARK00x1a2b", "MARK10x1a2b"])  # tags 00x1a2b, 10x1a2b
    assert "0x1a2b" not in pieces[0] | pieces[1]  # shared: it identifies no one
    assert foreign_markers("..0x1a2b..", 1, pieces) == []
    assert [f.source for f in foreign_markers("00x1a2b", 1, pieces)] == [0]


def test_a_requests_own_marker_is_no_finding():
    assert foreign_markers("MARK01x25e2 MARK01x25e2", 1, PIECES) == []
    found = foreign_markers("MARK01x25e2 and MARK02x5eb4", 1, PIECES)
    assert [(f.source, f.context) for f in found] == [(2, "MARK01x25e2 and MARK02x5eb4")]


def test_top2_margin():
    assert top2_margin({"a": -0.1, "b": -0.35, "c": -4.0}) == pytest.approx(0.25)
    assert top2_margin({"a": -0.1}) is None  # two top tokens that decode alike: one key
    assert top2_margin(None) is None and top2_margin({"a": "x", "b": True}) is None


def test_compare_runs():
    same = compare_runs(["a", "b", "c"], ["a", "b", "c"], 3)
    assert (same.first, same.compared, same.differing, same.differs) == (None, 3, 0, False)
    short = compare_runs(["a", "b", "c"], ["a"], 3)  # a position one run lacks differs
    assert (short.first, short.compared, short.differing) == (1, 3, 2)
    window = compare_runs(["a", "b", "x"], ["a", "b", "c"], 2)
    assert window.first is None and window.compared == 2


TIE, WIDE = 0.004, 2.5


def _margins(at: float) -> list[float]:
    return [WIDE, WIDE, at, WIDE]


@pytest.mark.parametrize(
    ("rule", "margin", "drift"),
    [(MARGIN, TIE, True), (MARGIN, WIDE, False), (EXACT, TIE, False), (MARGIN, 0.1, True)],
    ids=["tie", "wide", "exact_rule", "at_epsilon"],
)
def test_the_drift_rule(rule, margin, drift):
    c = compare_runs(
        ["a", "b", "c", "d"],
        ["a", "b", "x", "y"],
        4,
        rule=rule,
        epsilon=0.1,
        reference_margins=_margins(margin),
        other_margins=[0.0] * 4,
    )
    assert c.first == 2 and c.drift is drift and c.margins == (margin, 0.0)
    # drift: the two tokens before the flip are compared, nothing after it
    assert (c.compared, c.differing) == ((2, 0) if drift else (4, 2))


def test_the_other_runs_margin_counts_too():
    c = compare_runs("abcd", "abxy", 4, rule=MARGIN, epsilon=0.1, other_margins=_margins(TIE))
    assert c.drift and c.margins == (None, TIE)
    unknown = compare_runs("abcd", "abxy", 4, rule=MARGIN, epsilon=0.1)
    assert not unknown.drift  # no margin known at the divergence: the rule cannot call it drift


def test_a_tie_in_one_run_against_a_sure_other_is_a_leak():
    # the served planted fault (2026-12-08): tied in the reference, sure in the batch
    c = compare_runs(
        "abcd", "abxy", 4, rule=MARGIN, epsilon=0.1,
        reference_margins=_margins(0.0), other_margins=_margins(0.969),
    )  # fmt: skip
    assert not c.drift and c.differs and c.margins == (0.0, 0.969)

    # both near a tie, together within epsilon: drift; each within it but not together: a leak
    def pair(ref: float, other: float):
        margins = {"reference_margins": _margins(ref), "other_margins": _margins(other)}
        return compare_runs("abcd", "abxy", 4, rule=MARGIN, epsilon=0.1, **margins)

    assert pair(0.031, 0.062).drift and not pair(0.06, 0.06).drift


def _run(tokens: list[str], margins: list[float] | None = None) -> Completion:
    return Completion("".join(tokens), tokens, "logprobs", margins, len(tokens), "length")


def _judge(batch0: list[str], margins: list[float]) -> str:
    ref = [" t1", " t2", " t3", " t4"]
    other = [" u1", " u2", " u3", " u4"]
    runs = {
        "reference": [_run(ref, margins), _run(other)],
        "batch": [_run(batch0, margins), _run(other)],
        "reference_after": [_run(ref, margins), _run(other)],
    }
    rule = Rule(window=4, min_compared=2, kind=MARGIN, epsilon=0.1)
    return judge(0, ["r0", "r1"], MARKERS[:2], marker_pieces(MARKERS[:2]), runs, rule).verdict


def test_a_recorded_tie_is_drift():
    assert _judge([" t1", " t2", " t9", " t8"], _margins(TIE)) == "DRIFT"


def test_a_wide_margin_is_a_leak():
    assert _judge([" t1", " t2", " t9", " t8"], _margins(WIDE)) == "FAIL"


def test_a_foreign_marker_fails_even_on_a_tie():
    assert _judge([" t1", " t2", " t9", " MARK01x25e2"], _margins(TIE)) == "FAIL"


def test_too_few_tokens_compared_is_short():
    assert _judge([" t1", " t9", " t8", " t7"], [WIDE, TIE, WIDE, WIDE]) == "SHORT"


def test_max_in_flight():
    assert max_in_flight([]) == 0
    assert max_in_flight([(0, 1), (1, 2), (2, 3)]) == 1  # one after another: no batch
    assert max_in_flight([(0, 3), (1, 2), (1.5, 4)]) == 3
    assert max_in_flight([(0, 2), (1, 3), (2.5, 4)]) == 2


def _report(max_in_flight: int, verdict: str = "PASS") -> Report:
    row = RequestResult("http_shared_prefix", "r0", MARKERS[0], 8, 0.0, None, verdict)
    cfg = {"max_in_flight": max_in_flight, "concurrency": 4, "min_compared": 8}
    return Report(cfg, [ScenarioResult("http_shared_prefix", "", [row])])


def test_a_run_whose_requests_never_overlapped_is_not_a_batch_test(capsys):
    assert http_status("cpkv-validate", _report(2)) == 0
    assert http_status("cpkv-validate", _report(1)) == 2
    err = capsys.readouterr().err
    assert err.startswith("cpkv-validate: error: not a batch test: at most 1 request was in ")
    assert err.count("\n") == 1
    assert "NOT A BATCH TEST" in http_summary(_report(1))
    assert http_status("cpkv-validate", _report(1, "FAIL")) == 1  # contamination comes first
