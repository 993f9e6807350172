"""Output formats for `govctl check`: text (default), json, github (workflow commands)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TextIO

from govctl._diagnostics import CheckResult

Reporter = Callable[[CheckResult, TextIO], None]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _summary(result: CheckResult) -> str:
    return (
        f"{_plural(len(result.errors), 'error')}, {_plural(len(result.warnings), 'warning')} "
        f"in {_plural(result.files_checked, 'file')}"
    )


def report_text(result: CheckResult, out: TextIO) -> None:
    """One `level[CODE]: message (file:line)` line per diagnostic, then a summary line."""
    for d in result.diagnostics:
        out.write(f"{d}\n")
    if result.diagnostics:
        out.write(f"govctl: {_summary(result)}\n")
    else:
        out.write(f"ok -- {_plural(result.files_checked, 'file')} checked\n")


def report_json(result: CheckResult, out: TextIO) -> None:
    """A single JSON object: counts plus the list of diagnostics."""
    doc = {
        "files_checked": result.files_checked,
        "errors": len(result.errors),
        "warnings": len(result.warnings),
        "diagnostics": [d.as_dict() for d in result.diagnostics],
    }
    out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def report_github(result: CheckResult, out: TextIO) -> None:
    """GitHub Actions workflow commands, which annotate the lines in a pull request."""
    for d in result.diagnostics:
        props = f"file={_escape_prop(d.file)},line={d.line},title={_escape_prop(d.code)}"
        out.write(f"::{d.level} {props}::{_escape_data(d.message)}\n")
    out.write(f"govctl: {_summary(result)}\n")


REPORTERS: dict[str, Reporter] = {
    "text": report_text,
    "json": report_json,
    "github": report_github,
}
