"""Every fixture under fixtures/negative/<CODE>/ and fixtures/positive/, auto-parametrised.

A negative case is a .toml file or a directory of them (cross-file rules). Each expected
diagnostic is marked on its line with a trailing `# <- CODE` comment (several: `# <- E023,
E023`); the run must report exactly the marked (file, code, line) triples, no more, no fewer.
A case (positive or negative) that holds gov/config.toml is a whole repository, checked from
its root: rules that read the repository's policy (tag vocabulary, guards) need one.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from _govctl_support import FIXTURES
from govctl import CODES

MARK_RE = re.compile(r"#\s*<-\s*([EW]\d{3}(?:\s*,\s*[EW]\d{3})*)")


def _cases(kind: str) -> list[Path]:
    base = FIXTURES / kind
    dirs = sorted(base.iterdir()) if kind == "negative" else [base]
    return [p for d in dirs for p in sorted(d.iterdir()) if p.suffix == ".toml" or p.is_dir()]


def _files(case: Path) -> list[Path]:
    return sorted(case.rglob("*.toml")) if case.is_dir() else [case]


def expected(case: Path) -> Counter[tuple[str, str, int]]:
    """(file name, code, line) for every `# <- CODE` marker in the case's files."""
    out: Counter[tuple[str, str, int]] = Counter()
    for f in _files(case):
        text = f.read_bytes().decode("latin-1")  # the E003 fixture is not UTF-8 on purpose
        for lineno, line in enumerate(text.splitlines(), 1):
            m = MARK_RE.search(line)
            if m:
                for code in re.findall(r"[EW]\d{3}", m.group(1)):
                    out[(f.name, code, lineno)] += 1
    return out


def _is_repo(case: Path) -> bool:
    return (case / "gov" / "config.toml").is_file()


def _id(case: Path) -> str:
    return case.relative_to(FIXTURES).as_posix()


NEGATIVE = _cases("negative")
POSITIVE = _cases("positive")


@pytest.mark.parametrize("case", NEGATIVE, ids=_id)
def test_negative_fixture_reports_exactly_its_marks(case: Path, run_line) -> None:
    want = expected(case)
    code_dir = case.relative_to(FIXTURES / "negative").parts[0]
    assert want, f"{case} has no `# <- CODE` marker"
    assert code_dir in {code for _, code, _ in want}, f"{case} does not exercise {code_dir}"
    if _is_repo(case):
        r = run_line(["check", "--format", "json"], cwd=case)
    else:
        r = run_line(["check", "--format", "json", case])
    got = Counter(
        (Path(d["file"]).name, d["code"], d["line"]) for d in json.loads(r.stdout)["diagnostics"]
    )
    assert got == want
    has_error = any(CODES[code][0] == "error" for _, code, _ in want)
    assert r.exit_code == (1 if has_error else 0)
    if not has_error:  # warnings only: -W turns them into a failure
        args, cwd = (["check", "-W"], case) if _is_repo(case) else (["check", "-W", case], None)
        assert run_line(args, cwd=cwd).exit_code == 1


@pytest.mark.parametrize("case", POSITIVE, ids=_id)
def test_positive_fixture_is_clean(case: Path, run_line) -> None:
    if _is_repo(case):  # `govctl check` at its root
        r = run_line(["check", "-W", "--format", "json"], cwd=case)
        n_files = len(list((case / "gov" / "work").glob("*.toml")))
    else:
        r = run_line(["check", "-W", "--format", "json", case])
        n_files = len(_files(case))
    assert json.loads(r.stdout)["diagnostics"] == []
    assert r.exit_code == 0
    assert json.loads(r.stdout)["files_checked"] == n_files


def test_every_code_has_a_negative_fixture() -> None:
    assert {p.name for p in (FIXTURES / "negative").iterdir()} == set(CODES)


def test_positive_fixtures_have_no_marks() -> None:
    for case in POSITIVE:
        assert not expected(case), case
