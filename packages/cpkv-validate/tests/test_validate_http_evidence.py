"""The http engine passes only on evidence: each request's runs carry the tokens asked for.

Against a stub server (a thread) whose completions are empty, one token of many, cut short
without saying why, or complete, ``cpkv-validate --url`` exits 2 with one line saying there is no
evidence (the table, on stdout, shows each run's tokens and finish reason), or passes when the
server generated everything or said it stopped. Before, every row of an empty server printed PASS,
"tokens compared 0", and the command exited 0.
"""

from __future__ import annotations

import json

import pytest
from _servers import stub_server
from cpkv_validate._client import Completion
from cpkv_validate._http import evidence_short
from cpkv_validate.cli import main
from hostile_cli import run_in_process

N = 8  # --max-tokens of these runs


def _words(n: int) -> str:
    return " " + " ".join(f"t{k}" for k in range(n))


def _run(complete, *extra: str):
    with stub_server(complete) as url:
        argv = ["--url", url, "--concurrency", "4", "--max-tokens", str(N), "--no-progress"]
        return run_in_process(main, [*argv, *extra])


def _no_evidence(run, requests: int = 4) -> None:
    assert run.code == 2, run
    assert run.err.count("\n") == 1 and "Traceback" not in run.err
    assert run.err.startswith(
        f"cpkv-validate: error: no evidence: {requests} of {requests} requests generated fewer "
        f"than --max-tokens {N} tokens without finish reason 'stop'"
    )
    assert "SHORT" in run.out and "PASS" not in run.out and "NO EVIDENCE" in run.out


@pytest.mark.parametrize(
    "answer",
    [("", 0, "length"), ("", None, None), ("", 0, "stop")],
    ids=["empty_length", "empty_no_finish", "empty_stop"],
)
def test_a_server_that_generates_nothing_fails(answer):
    run = _run(lambda prompt, nth: answer)
    _no_evidence(run)
    assert "0 (" in run.out  # the evidence columns: 0 tokens in each run


@pytest.mark.parametrize(
    "answer", [(_words(1), 1, "length"), (_words(1), None, None)], ids=["length", "no_finish"]
)
def test_one_token_of_many_fails(answer):
    run = _run(lambda prompt, nth: answer)
    _no_evidence(run)
    assert "1 (length)" in run.out or "1 (no finish reason)" in run.out


def test_only_the_batch_run_short_fails():
    run = _run(lambda prompt, nth: (_words(N), N, "length") if nth == 0 else ("", 0, "length"))
    # the batch's empty answers also differ from the golden: that is contamination, exit 1
    assert run.code == 1 and "FAIL" in run.out


def test_every_token_generated_passes(tmp_path):
    report = tmp_path / "r.json"
    run = _run(lambda prompt, nth: (_words(N), N, "length"), "--json", str(report))
    assert run.code == 0 and run.err == "" and "OK" in run.out
    rows = json.loads(report.read_text())["scenarios"][0]["requests"]
    assert [r["evidence"] for r in rows] == [{"alone": "8 (length)", "batch": "8 (length)"}] * 4
    assert all(r["rows"] == N and r["verdict"] == "PASS" for r in rows)


def test_a_server_that_stops_early_by_itself_passes():
    run = _run(lambda prompt, nth: (_words(3), 3, "stop"))
    assert run.code == 0, run
    assert "3 (stop)" in run.out


def test_usage_counts_tokens_when_the_text_has_fewer_words():
    """A server without per-token output: its own token count is the evidence (8 tokens may
    decode to 5 words)."""
    run = _run(lambda prompt, nth: (_words(5), N, "length"))
    assert run.code == 0, run


def test_differing_never_exceeds_compared(tmp_path):
    """Alone 2 tokens (stop), batch 5: 5 positions compared, 3 differ (was "compared 2,
    differing 3")."""
    report = tmp_path / "r.json"
    run = _run(
        lambda prompt, nth: (_words(2), 2, "stop") if nth == 0 else (_words(5), 5, "stop"),
        "--json",
        str(report),
    )
    assert run.code == 1
    rows = json.loads(report.read_text())["scenarios"][0]["requests"]
    assert all((r["rows"], r["max_abs_diff"], r["first_bad"]) == (5, 3, 2) for r in rows)


@pytest.mark.parametrize(
    ("generated", "finish", "short"),
    [(8, "length", False), (7, "length", True), (0, "stop", False), (3, None, True)],
)
def test_evidence_rule(generated, finish, short):
    assert evidence_short(Completion([], generated, finish), N) is short
