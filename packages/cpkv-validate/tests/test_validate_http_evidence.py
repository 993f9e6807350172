"""The http engine passes only on evidence: enough tokens compared per request, counted from the
replies themselves, never from ``usage``.

Against stub servers (threads) whose completions are empty, one word of many, one token and a
stop, or complete, ``cpkv-validate --url`` exits 2 with one line, "not enough evidence" (the table
shows each run's count, the server's own count beside it where it disagrees), or passes when
every request compared at least ``--min-compared`` tokens. Before, a reply of one word whose
``usage.completion_tokens`` said 8 passed with one position compared under a header that said "8
greedy tokens compared", and one token with finish ``stop`` passed too.
"""

from __future__ import annotations

import json
import zlib

import pytest
from _fakes import stub_server
from cpkv_validate.cli import main
from hostile_cli import run_in_process

N = 8  # --max-tokens of these runs


def _words(n: int, prompt: str = "") -> str:
    """``n`` words; with ``prompt``, words of that prompt only (a server whose answers do not
    depend on the prompt is refused: nothing could show a leak)."""
    tag = zlib.crc32(prompt.encode()) % 1000
    return " " + " ".join(f"t{k}x{tag}" for k in range(n))


def _run(complete, *extra: str):
    with stub_server(complete) as url:
        argv = ["--url", url, "--concurrency", "4", "--max-tokens", str(N), "--no-progress"]
        return run_in_process(main, [*argv, *extra])


def _not_enough(run, requests: int = 4) -> None:
    assert run.code == 2, run
    assert run.err.count("\n") == 1 and "Traceback" not in run.err
    assert run.err.startswith(
        f"cpkv-validate: error: not enough evidence: {requests} of {requests} requests compared "
        f"fewer than --min-compared 8 tokens"
    )
    assert "SHORT" in run.out and "PASS" not in run.out and "NOT ENOUGH EVIDENCE" in run.out


@pytest.mark.parametrize(
    "answer",
    [("", 0, "length"), ("", None, None), ("", 0, "stop")],
    ids=["empty_length", "empty_no_finish", "empty_stop"],
)
def test_a_server_that_generates_nothing_fails(answer):
    run = _run(lambda prompt, nth: answer)
    _not_enough(run)
    assert "0 (" in run.out  # the evidence columns: 0 words in each run


@pytest.mark.parametrize(
    "answer", [(_words(1), 1, "length"), (_words(1), None, None)], ids=["length", "no_finish"]
)
def test_one_token_of_many_fails(answer):
    run = _run(lambda prompt, nth: answer)
    _not_enough(run)
    assert "1 (length)" in run.out or "1 (no finish reason)" in run.out


def test_one_word_that_usage_calls_eight_fails_and_shows_both_counts():
    """The finding: ``usage.completion_tokens`` said 8 for a one-word reply, and the request
    passed with one position compared. The count is the reply's; usage is shown beside it."""
    run = _run(lambda prompt, nth: (_words(1, prompt), N, "length"))
    _not_enough(run)
    assert "1, usage says 8 (length)" in run.out
    assert "compared per request: 1 words of the first 8 generated" in run.out  # the header


def test_one_token_and_a_stop_fails():
    """The finding: one token with finish ``stop`` passed (the server "stopped by itself")."""
    run = _run(lambda prompt, nth: (_words(1, prompt), 1, "stop"))
    _not_enough(run)
    assert "1 (stop)" in run.out


def test_only_the_batch_run_short_fails():
    run = _run(
        lambda prompt, nth: (_words(N, prompt), N, "length") if nth == 0 else ("", 0, "length")
    )
    # the batch's empty answers differ from the reference: that is contamination, exit 1
    assert run.code == 1 and "FAIL" in run.out


def test_every_token_generated_passes_and_shows_the_count(tmp_path):
    report = tmp_path / "r.json"
    run = _run(lambda prompt, nth: (_words(N, prompt), N, "length"), "--json", str(report))
    assert run.code == 0 and run.err == "" and "OK" in run.out
    assert "compared per request: 8 words of the first 8 generated" in run.out
    rows = json.loads(report.read_text())["scenarios"][0]["requests"]
    want = {"reference": "8 (length)", "batch": "8 (length)", "reference_after": "8 (length)"}
    assert [r["evidence"] for r in rows] == [want] * 4
    assert all(r["rows"] == N and r["verdict"] == "PASS" for r in rows)


def test_a_server_that_stops_early_passes_on_enough_tokens():
    run = _run(lambda prompt, nth: (_words(3, prompt), 3, "stop"), "--min-compared", "3")
    assert run.code == 0, run
    assert "3 (stop)" in run.out


def test_usage_is_shown_never_counted():
    """A server without per-token output says 8 tokens for 5 words: 5 are compared, and 5 are
    enough only when ``--min-compared`` says so."""
    short = _run(lambda prompt, nth: (_words(5, prompt), N, "length"))
    _not_enough(short)
    run = _run(lambda prompt, nth: (_words(5, prompt), N, "length"), "--min-compared", "5")
    assert run.code == 0, run
    assert "5, usage says 8 (length)" in run.out


def test_differing_never_exceeds_compared(tmp_path):
    """Reference 2 tokens (stop), batch 5: 5 positions compared, 3 differ."""
    report = tmp_path / "r.json"
    run = _run(
        lambda prompt, nth: (
            (_words(2, prompt), 2, "stop") if nth != 1 else (_words(5, prompt), 5, "stop")
        ),
        "--json",
        str(report),
    )
    assert run.code == 1
    rows = json.loads(report.read_text())["scenarios"][0]["requests"]
    assert all((r["rows"], r["max_abs_diff"], r["first_bad"]) == (5, 3, 2) for r in rows)
