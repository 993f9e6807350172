"""Reporters: exact output of text, json and github for one known set of problems."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from govctl import REPORTERS, CheckResult, Diagnostic

ITEM = """\
#:schema ../schema/work.schema.json

[govctl]
id = "WI-2026-08-01-a3f9"
title = "Localise the current KV"
status = "done"
created = "2026-08-01"
started = "2026-08-04"
completed = "2026-08-03"

[content]
description = "TODO"

[[content.acceptance_criteria]]
text = "Only local tokens reach the cache write"
status = "done"
category = "fixed"
"""
FILE = "gov/work/2026-08-01-x.toml"


@pytest.fixture
def bad_repo(gov_repo: Path) -> Path:
    (gov_repo / FILE).write_text(ITEM)
    return gov_repo


def test_text(bad_repo: Path, run_line) -> None:
    r = run_line(["check"], cwd=bad_repo)
    assert r.stdout == (
        f"error[E012]: 'completed' (2026-08-03) precedes 'started' (2026-08-04) ({FILE}:9)\n"
        f"warning[W001]: placeholder description 'TODO'; say what and why ({FILE}:12)\n"
        "govctl: 1 error, 1 warning in 1 file\n"
    )
    assert (r.exit_code, r.stderr) == (1, "")


def test_json(bad_repo: Path, run_line) -> None:
    r = run_line(["check", "--format", "json"], cwd=bad_repo)
    assert json.loads(r.stdout) == {
        "files_checked": 1,
        "errors": 1,
        "warnings": 1,
        "diagnostics": [
            {
                "level": "error",
                "code": "E012",
                "message": "'completed' (2026-08-03) precedes 'started' (2026-08-04)",
                "file": FILE,
                "line": 9,
            },
            {
                "level": "warning",
                "code": "W001",
                "message": "placeholder description 'TODO'; say what and why",
                "file": FILE,
                "line": 12,
            },
        ],
    }
    assert r.exit_code == 1


def test_github(bad_repo: Path, run_line) -> None:
    r = run_line(["check", "--format", "github"], cwd=bad_repo)
    assert r.stdout == (
        f"::error file={FILE},line=9,title=E012::'completed' (2026-08-03) precedes 'started' "
        "(2026-08-04)\n"
        f"::warning file={FILE},line=12,title=W001::placeholder description 'TODO'; say what and "
        "why\n"
        "govctl: 1 error, 1 warning in 1 file\n"
    )


def test_github_escapes_workflow_command_syntax() -> None:
    d = Diagnostic("error", "E001", "a\nb 100%", "dir,x/a:b.toml", 3)
    out = io.StringIO()
    REPORTERS["github"](CheckResult([d], 1), out)
    assert out.getvalue().splitlines()[0] == (
        "::error file=dir%2Cx/a%3Ab.toml,line=3,title=E001::a%0Ab 100%25"
    )


def test_clean_run(gov_repo: Path, run_line) -> None:
    (gov_repo / FILE).write_text(
        ITEM.replace('"2026-08-03"', '"2026-08-05"').replace('"TODO"', '"Slice the KV."')
    )
    for fmt, want in (
        ("text", "ok -- 1 file checked\n"),
        ("github", "govctl: 0 errors, 0 warnings in 1 file\n"),
    ):
        r = run_line(["check", "--format", fmt, "-W"], cwd=gov_repo)
        assert (r.exit_code, r.stdout) == (0, want)


def test_deny_warnings(gov_repo: Path, run_line) -> None:
    (gov_repo / FILE).write_text(ITEM.replace('"2026-08-03"', '"2026-08-05"'))
    assert run_line(["check"], cwd=gov_repo).exit_code == 0
    assert run_line(["check", "-W"], cwd=gov_repo).exit_code == 1
    assert run_line(["check", "--deny-warnings"], cwd=gov_repo).exit_code == 1


def test_diagnostic_str_matches_house_format() -> None:
    d = Diagnostic(
        "error", "E012", "'completed' precedes 'started'", "gov/work/2026-08-01-x.toml", 14
    )
    assert str(d) == "error[E012]: 'completed' precedes 'started' (gov/work/2026-08-01-x.toml:14)"
