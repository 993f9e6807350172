"""The serve suite's controls: plain SGLang on a configuration's own arguments, and the comparison
that sets the configuration's outputs beside the control's.

No server starts here (it needs a GPU): ``check_config`` stands in for the server's run, so that
what ``run_check`` would launch can be read; the reports compared are in ``cpkv-validate``'s JSON
shape (``scenarios[0].requests[]``), the fields the comparison reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import _sglang_env as env
import pytest

pytestmark = env.SGLANG_IMPORT_WARNINGS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import serve_suite  # noqa: E402


def test_a_control_is_plain_sglang_on_the_configurations_own_arguments(monkeypatch, tmp_path):
    launched = {}

    def server_run(name, argv, env, out, **kw):
        launched.update(name=name, argv=argv, env=env, **kw)
        return kw["row"]

    monkeypatch.setattr(serve_suite, "check_config", server_run)
    # a configuration whose own environment names plugins: the control still keeps cpkv out
    extra, _, what = serve_suite.CONFIGS["fp8"]
    monkeypatch.setitem(
        serve_suite.CONFIGS, "fp8", (extra, {"SGLANG_PLUGINS": "cpkv", "X": "1"}, what)
    )
    args = SimpleNamespace(
        out=tmp_path, no_timing=True, ready_timeout=60.0, prefix_words=450, seed=3
    )
    serve_suite.run_check("plain-fp8", {"config": "plain-fp8"}, args, ["--base"], False)
    assert launched["command"] is serve_suite.PLAIN
    assert launched["argv"] == ["--base", *extra]
    assert launched["env"] == {"SGLANG_PLUGINS": "none", "X": "1"}
    assert launched["harness"] == ["--prefix-words", "450", "--seed", "3"]
    assert launched["ready_timeout"] == 60.0
    assert launched["timed"] is False


def test_configurations_that_need_a_cpkv_flag_have_no_control():
    assert "plain-indexcache-f4" not in serve_suite.CONTROLS  # plain SGLang refuses the flag
    assert serve_suite.CONTROLS["plain"] == "bf16" and serve_suite.CONTROLS["plain-fp8"] == "fp8"
    assert serve_suite.CONTROLS["plain-eagle"] == "eagle"


def test_the_controls_are_named_in_the_refusal(tmp_path, capsys):
    with pytest.raises(SystemExit):
        serve_suite.main(["--out", str(tmp_path), "--only", "plain-nothing"])
    err = capsys.readouterr().err
    assert "unknown --only ['plain-nothing']" in err and "'plain-eagle'" in err


def report(path: Path, outcomes: dict[str, tuple[str, int | None, str, str]]) -> None:
    """A cpkv-validate report: request -> (verdict, first differing token, reference, batch)."""
    rows = [
        {"request": k, "verdict": v, "first_bad": bad,
         "detail": {"outputs": {"reference": ref, "batch": batch, "reference_after": ref}}}
        for k, (v, bad, ref, batch) in outcomes.items()
    ]  # fmt: skip
    path.write_text(json.dumps({"ok": False, "scenarios": [{"requests": rows}]}))


def rows_for(*names: str) -> list[dict]:
    return [{"config": n, "validate_exit": 1} for n in names]


def test_a_fail_the_control_shows_on_the_same_outputs_is_said(tmp_path):
    same = {"r0": ("PASS", None, "ab", "ab"), "r1": ("FAIL", 3, "abcd", "abce")}
    report(tmp_path / "validate-fp8.json", same)
    report(tmp_path / "validate-plain-fp8.json", same)
    rows = rows_for("fp8", "plain-fp8")
    serve_suite.against_plain(tmp_path, rows)
    found = rows[0]["against_plain"]
    assert found == {
        "control": "plain-fp8", "requests": 2, "same_reference": 2, "same_batch": 2,
        "fail": ["r1@3"], "control_fail": ["r1@3"],
    }  # fmt: skip
    note = serve_suite.plain_note(rows[0])
    assert note == "vs plain-fp8: same reference 2/2, same batch 2/2; FAIL r1@3 (plain-fp8: r1@3)"
    assert note in serve_suite.suite_table(rows)


def test_mutation_a_fail_of_the_plugins_alone_shows_as_such(tmp_path):
    report(
        tmp_path / "validate-fp8.json",
        {"r0": ("FAIL", 1, "ab", "xb"), "r1": ("PASS", None, "c", "c")},
    )
    report(
        tmp_path / "validate-plain-fp8.json",
        {"r0": ("PASS", None, "ab", "ab"), "r1": ("PASS", None, "c", "c")},
    )
    rows = rows_for("fp8", "plain-fp8")
    serve_suite.against_plain(tmp_path, rows)
    found = rows[0]["against_plain"]
    assert found["same_reference"] == 2 and found["same_batch"] == 1
    assert found["fail"] == ["r0@1"] and found["control_fail"] == []
    assert serve_suite.plain_note(rows[0]).endswith("FAIL r0@1 (plain-fp8: none)")


def test_no_comparison_without_both_runs_of_this_suite(tmp_path):
    """A report left from an earlier call is not this run's control: the rows decide."""
    report(tmp_path / "validate-fp8.json", {"r0": ("PASS", None, "a", "a")})
    report(tmp_path / "validate-plain-fp8.json", {"r0": ("PASS", None, "a", "a")})
    rows = [{"config": "fp8", "validate_exit": 0}]  # plain-fp8 did not run this time
    serve_suite.against_plain(tmp_path, rows)
    assert "against_plain" not in rows[0] and serve_suite.plain_note(rows[0]) == ""


def test_a_report_that_cannot_be_read_is_said_not_compared(tmp_path):
    report(tmp_path / "validate-plain-fp8.json", {"r0": ("PASS", None, "a", "a")})
    (tmp_path / "validate-fp8.json").write_text('{"ok": false, "scenar')  # cut off
    rows = rows_for("fp8", "plain-fp8")
    serve_suite.against_plain(tmp_path, rows)
    assert serve_suite.plain_note(rows[0]).startswith("vs plain-fp8: not compared (JSONDecodeError")


def test_outputs_that_read_alike_but_differ_by_token_id_are_not_the_same(tmp_path):
    """cpkv-validate's reports carry the generated token ids (SGLang's /generate): two byte
    tokens that both decode to U+FFFD are different tokens, and the comparison says so."""
    report(tmp_path / "validate-fp8.json", {"r0": ("PASS", None, "\ufffd\ufffd", "\ufffd\ufffd")})
    report(
        tmp_path / "validate-plain-fp8.json",
        {"r0": ("PASS", None, "\ufffd\ufffd", "\ufffd\ufffd")},
    )
    for name, batch in (("fp8", ["7", "9"]), ("plain-fp8", ["7", "11"])):
        path = tmp_path / f"validate-{name}.json"
        data = json.loads(path.read_text())
        data["scenarios"][0]["requests"][0]["detail"]["generated"] = {
            "reference": ["7", "9"], "batch": batch, "reference_after": ["7", "9"],
        }  # fmt: skip
        path.write_text(json.dumps(data))
    rows = rows_for("fp8", "plain-fp8")
    serve_suite.against_plain(tmp_path, rows)
    found = rows[0]["against_plain"]
    assert found["same_reference"] == 1 and found["same_batch"] == 0  # by text: 1 and 1


NO_EVIDENCE = (
    "table\ncpkv-validate: error: not enough evidence: 1 of 8 requests compared fewer than "
    "--min-compared 8 tokens (counted from the replies, not usage), so matching outputs prove "
    "little; the table shows each run's tokens"
)


def test_exit_2_of_cpkv_validate_is_inconclusive_not_fail_except_for_the_planted_fault():
    row = {
        "config": "fp8", "requests_ok": True, "hooks_ok": True, "validate_exit": 2,
        "validate_tail": NO_EVIDENCE, "validate_short": 1,
    }  # fmt: skip
    assert serve_suite.verdict_of(row) == "INCONCLUSIVE"
    assert serve_suite.validate_line(row) == (
        "not enough evidence: 1 of 8 requests compared fewer than --min-compared 8 tokens"
    )
    assert "| fp8 | INCONCLUSIVE |" in serve_suite.suite_table([row])
    # the planted fault must be found: no evidence is a failed check
    assert serve_suite.verdict_of({**row, "config": "planted-fault"}) == "FAIL"
    # a server that did not answer, or a check stopped on the way, is no inconclusive run
    assert serve_suite.verdict_of({**row, "requests_ok": False}) == "FAIL"
    assert serve_suite.verdict_of({**row, "error": "stopped by SIGTERM"}) == "FAIL"
    assert serve_suite.verdict_of({**row, "validate_exit": 1}) == "FAIL"
    assert serve_suite.verdict_of({**row, "ok": True}) == "PASS"
    # the plugin's hooks did not all apply: a failed check, whatever cpkv-validate said
    assert serve_suite.verdict_of({**row, "hooks_ok": False}) == "FAIL"
    # a control runs plain SGLang, without hooks
    assert serve_suite.verdict_of({**row, "config": "plain-fp8", "hooks_ok": False}) == (
        "INCONCLUSIVE"
    )
    # any other exit 2 (the server stopped answering mid-run) is a failure
    broken = "cpkv-validate: error: http://127.0.0.1:1/generate answered HTTP 500 Internal Error"
    assert serve_suite.verdict_of({**row, "validate_tail": broken, "validate_short": None}) == (
        "FAIL"
    )


def test_the_short_requests_are_counted_from_the_report(tmp_path):
    path = tmp_path / "validate-fp8.json"
    report(path, {"r0": ("SHORT", 2, "a", "b"), "r1": ("PASS", None, "c", "c")})
    assert serve_suite.short_requests(path) == 1
    assert serve_suite.short_requests(tmp_path / "missing.json") is None
