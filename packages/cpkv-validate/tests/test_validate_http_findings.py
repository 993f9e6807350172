"""``cpkv-validate --url`` against fake servers, one per behaviour it must judge (``_fakes``).

Each test is a finding of a new user's first runs; each failed before its fix:

- a deterministic leak that the batch-size-1 reference shows too (the reference shared the
  server's cache) passed, exit 0: now the marker check fails it, whatever the reference shows;
- the reference shared server state with the batch: now each reference request follows a cache
  flush, and without one the report says so;
- a server whose answers change after a batch passed: the reference now runs again after it;
- ``--concurrency 1`` passed a bug that needs two requests at once: now refused, and the
  overlap is measured and reported;
- a near-tie flipped by the batch is DRIFT (not exit 1), a wide margin or a foreign marker FAIL;
  the rule used and the margins are in the report.
"""

from __future__ import annotations

import json

import pytest
from _fakes import (
    CacheLeak,
    ChangesAfterBatch,
    Fake,
    FirstMarkerCache,
    NearTieFlip,
    OverlapCorruption,
    SameAnswer,
    honest,
    serve,
)
from cpkv_validate import make_prompts
from cpkv_validate.cli import main
from hostile_cli import run_in_process

N = 8  # tokens generated and compared


def _run(fake: Fake, tmp_path, *extra: str, concurrency: int = 4):
    report = tmp_path / "r.json"
    with serve(fake) as url:
        argv = ["--url", url, "--concurrency", str(concurrency), "--max-tokens", str(N)]
        run = run_in_process(main, [*argv, "--no-progress", "--json", str(report), *extra])
    rows = json.loads(report.read_text())["scenarios"][0]["requests"] if report.exists() else []
    return run, rows, (json.loads(report.read_text())["config"] if rows else {})


def test_an_honest_server_passes_with_the_compared_count_per_request(tmp_path):
    run, rows, cfg = _run(Fake(), tmp_path)
    assert run.code == 0 and run.err == "", run
    assert [(r["verdict"], r["rows"]) for r in rows] == [("PASS", N)] * 4
    assert "compared per request: 8 tokens of the first 8 generated" in run.out
    assert run.out.count(f"│        {N} │") == 4  # the compared column, one row per request
    assert cfg["drift_rule"] == "margin" and cfg["max_in_flight"] >= 2


def test_a_server_that_answers_every_prompt_alike_proves_nothing(tmp_path):
    """Equal outputs everywhere matched the reference (exit 0) while no leak could show."""
    run, _rows, cfg = _run(SameAnswer(), tmp_path)
    assert run.code == 2, run
    assert run.err.count("\n") == 1 and "contamination undetectable" in run.err
    assert cfg["distinct_reference_outputs"] == 1


@pytest.mark.parametrize("flush", [False, True], ids=["no_flush", "flush"])
def test_a_leaked_marker_fails_whatever_the_reference_shows(tmp_path, flush):
    """The cache hands every later request r0's marker. Without a flush the reference shows
    the same leak and agrees with the batch (it passed, exit 0); the marker check fails it."""
    run, rows, cfg = _run(FirstMarkerCache(flush=flush), tmp_path)
    assert run.code == 1 and "CONTAMINATION" in run.out, run
    failed = {r["request"]: r for r in rows if r["verdict"] == "FAIL"}
    assert len(failed) >= 2
    for r in failed.values():
        found = r["detail"]["foreign_markers"]
        assert found and all(f["source"] != r["request"] for f in found)
        source = next(s for s in rows if s["request"] == found[0]["source"])
        assert source["marker"] in r["detail"]["outputs"][found[0]["run"]]  # the text is kept
        assert r["leak_sources"] == [source["request"]]
        assert f"{r['request']} ← {source['request']}" in run.out
    if not flush:  # the reference leaked too: every run of r1..r3 holds r0's marker
        assert sorted(failed) == ["r1", "r2", "r3"]
        assert {f["run"] for f in failed["r1"]["detail"]["foreign_markers"]} == {
            "reference",
            "batch",
            "reference_after",
        }
        assert cfg["reference_isolation"].startswith("no cache flush offered: the reference")


def test_the_reference_is_isolated_by_a_flush_before_each_request(tmp_path):
    """A cache that answers later requests with the first one's answer: flushed before each
    reference request, the reference is each prompt's own answer, and the batch fails."""
    fake = CacheLeak()
    run, rows, cfg = _run(fake, tmp_path)
    _, prompts = make_prompts(4, seed=0)
    for r, (_, _, prompt) in zip(rows, prompts, strict=True):
        for k in ("reference", "reference_after"):
            assert r["detail"]["outputs"][k] == "".join(honest(prompt, N)), (r["request"], k)
    assert run.code == 1 and sum(r["verdict"] == "FAIL" for r in rows) >= 3
    # every reference completion (nth 0 and 2) comes right after a flush and the warm-up
    for i, event in enumerate(fake.events):
        if event in ("complete 0", "complete 2"):
            assert fake.events[i - 2 : i] == ["flush", "warm"], fake.events[: i + 1]
    assert (
        cfg["reference_isolation"]
        == "flushed (/flush_cache) before each of the 8 reference requests"
    )


def test_a_server_that_changes_after_the_batch_fails(tmp_path):
    run, rows, _ = _run(ChangesAfterBatch(), tmp_path)
    assert run.code == 1, run
    assert all(r["verdict"] == "FAIL" and r["detail"]["reference_change"] for r in rows)
    assert all(r["detail"]["divergence"] is None for r in rows)  # the batch itself matched
    assert "the reference after the batch differs from the reference at token 0" in run.out
    assert "the server changed under load" in run.out


def test_concurrency_1_is_refused(tmp_path):
    """It ran nothing at once and reported "match batch size 1" (exit 0) for a server whose
    bug needs two requests in flight."""
    run, rows, _ = _run(OverlapCorruption(), tmp_path, concurrency=1)
    assert run.code == 2 and rows == [], run
    assert run.err.startswith("cpkv-validate: error: --concurrency must be >= 2 (a batch test")


def test_an_overlap_bug_fails_and_the_overlap_is_reported(tmp_path):
    run, rows, cfg = _run(OverlapCorruption(), tmp_path)
    assert run.code == 1 and cfg["max_in_flight"] >= 2, run
    assert f"largest in flight: {cfg['max_in_flight']}" in run.out
    assert len(cfg["batch_intervals_s"]) == 4
    assert sum(r["verdict"] == "FAIL" for r in rows) >= 1  # the second arrival saw the first


R0 = make_prompts(4, seed=0)[1][0][1]  # request r0's marker


@pytest.mark.parametrize(
    ("fake", "code", "verdict"),
    [
        (lambda: NearTieFlip(0.001), 0, "DRIFT"),
        (lambda: NearTieFlip(1.0), 1, "FAIL"),
        (lambda: NearTieFlip(0.001, leak=R0), 1, "DRIFT"),
        (lambda: NearTieFlip(0.001, info={"enable_deterministic_inference": True}), 1, "FAIL"),
        (lambda: NearTieFlip(0.001, logprobs=False), 1, "FAIL"),
    ],
    ids=["near_tie", "wide_margin", "tie_and_marker", "deterministic", "no_logprobs"],
)
def test_drift_is_told_from_a_leak(tmp_path, fake, code, verdict):
    """The batch flips the greedy token at position 3. A near-tie there is DRIFT (exit 0, the 3
    tokens before it compared); a wide margin, a deterministic server (exact equality) or a
    server without logprobs (the rule cannot apply) make it FAIL, and a foreign marker in the
    output is FAIL even on a near-tie."""
    server = fake()
    run, rows, cfg = _run(server, tmp_path, "--min-compared", "3")
    assert run.code == code, run
    leaked = [r for r in rows if r["detail"]["foreign_markers"]]
    assert [r["request"] for r in leaked] == (["r1", "r2", "r3"] if server.leak else [])
    assert all(r["verdict"] == "FAIL" for r in leaked)
    assert {r["verdict"] for r in rows if r not in leaked} == {verdict}
    div = rows[0]["detail"]["divergence"]
    assert div["position"] == 3 and div["drift"] is (verdict == "DRIFT")
    assert div["margin_reference"] == (pytest.approx(server.margin) if server.logprobs else None)
    if verdict == "DRIFT":
        assert (rows[0]["rows"], rows[0]["max_abs_diff"]) == (3, 0)  # nothing after the flip
    text = cfg["drift_rule_text"]
    if server.info:
        assert cfg["drift_rule"] == "exact" and "deterministic inference" in text
    elif not server.logprobs:
        assert cfg["drift_rule"] == "exact" and "the drift rule could not apply" in text
    else:
        assert (cfg["drift_rule"], cfg["drift_epsilon"]) == ("margin", 0.1)
    if code == 0:
        assert "OK: 4 requests match batch size 1; 4 DRIFT (a near-tie" in run.out
