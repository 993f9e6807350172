"""Read and parse work item files: syntax errors with their line, unquoted dates with a hint.

Parsing is `tomllib`'s: it reports syntax errors (E001) and produces the date values that an
unquoted date leaves behind (E002).

A `WorkFile` holds the raw text, the parsed document (or None when it did not parse) and,
lazily, the key -> line map used to place diagnostics (`_lines.key_lines`).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from govctl._diagnostics import Diagnostic, diag
from govctl._lines import key_lines, lookup

_TOML_POS_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_TOML_EOF_RE = re.compile(r"\s*\(at end of document\)\s*$")
_DATE_TYPES = (dt.date, dt.time)  # dt.datetime is a dt.date
# A TOML date/time literal follows `=`, `,` or `[`; quoted dates never match. Only a file that
# matches is walked for date values (a walk of every value costs ~10 us per file).
_MAYBE_DATE_RE = re.compile(r"[=,\[]\s*(?:\d{4}-\d\d-\d\d|\d\d:\d\d:)")


@dataclass
class WorkFile:
    """One work item file.

    Attributes:
        path: where it lives on disk.
        shown: the path as printed in diagnostics.
        text: the decoded text ("" when unreadable).
        doc: the parsed document with unquoted dates already turned into strings; None when
            the file is unreadable or not valid TOML (`problems` then says why).
        problems: E001/E002/E003 diagnostics found while loading.
        unquoted: key paths of unquoted dates (E002); the schema does not report them again.
    """

    path: Path
    shown: str
    text: str = ""
    doc: dict[str, Any] | None = None
    problems: list[Diagnostic] = field(default_factory=list)
    unquoted: set[tuple[str | int, ...]] = field(default_factory=set)
    _lines: dict[tuple[str | int, ...], int] | None = None

    def line_of(self, *path: str | int) -> int:
        """1-based line of a key path such as ("govctl", "started")."""
        if self._lines is None:
            self._lines = key_lines(self.text)
        return lookup(self._lines, path)

    def diag(self, code: str, message: str, *path: str | int) -> Diagnostic:
        """A diagnostic in this file at the line of key `path` (line 1 when `path` is empty)."""
        return diag(code, message, self.shown, self.line_of(*path) if path else 1)

    def get(self, table: str, key: str) -> Any:
        """`doc[table][key]` or None, tolerating a document of the wrong shape."""
        t = self.doc.get(table) if isinstance(self.doc, dict) else None
        return t.get(key) if isinstance(t, dict) else None

    @property
    def item_id(self) -> str | None:
        v = self.get("govctl", "id")
        return v if isinstance(v, str) else None


def shown_path(path: Path, cwd: Path) -> str:
    """`path` relative to `cwd` when below it, else absolute (string ops: no symlink lookups)."""
    full = os.path.abspath(path)
    base = os.path.join(os.path.abspath(cwd), "")
    return (full[len(base) :] if full.startswith(base) else full).replace(os.sep, "/")


def load(path: Path, shown: str, text: str | None = None) -> WorkFile:
    """Read (unless `text` is given) and parse one file; never raises for bad content."""
    wf = WorkFile(path=path, shown=shown)
    if text is None:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            wf.problems.append(diag("E003", f"cannot read work item: {exc}", shown, 1))
            return wf
    wf.text = text
    found: list[tuple[tuple[str | int, ...], Any]] = []
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        wf.problems.append(_syntax_diag(str(exc), text, shown))
        return wf
    if _MAYBE_DATE_RE.search(text):
        _find_dates(doc, (), found)
    for where, value in found:
        wf.problems.append(_unquoted_date_diag(wf, where, value))
        wf.unquoted.add(where)
    wf.doc = doc
    return wf


def _syntax_diag(msg: str, text: str, shown: str) -> Diagnostic:
    m = _TOML_POS_RE.search(msg)
    if m:
        line = int(m.group(1))
        return diag("E001", f"TOML syntax: {msg[: m.start()]} (column {m.group(2)})", shown, line)
    m = _TOML_EOF_RE.search(msg)
    if m:
        return diag(
            "E001", f"TOML syntax: {msg[: m.start()]} at end of file", shown, text.count("\n") + 1
        )
    return diag("E001", f"TOML syntax: {msg}", shown, 1)


def _find_dates(node: Any, where: tuple[str | int, ...], out: list) -> None:
    """Replace TOML date/time values by their ISO strings in place, recording where they were."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        if isinstance(v, _DATE_TYPES):
            out.append(((*where, k), v))
            node[k] = v.isoformat()
        elif isinstance(v, (dict, list)):
            _find_dates(v, (*where, k), out)


def _unquoted_date_diag(wf: WorkFile, where: tuple[str | int, ...], value: Any) -> Diagnostic:
    line = wf.line_of(*where)
    raw = wf.text.splitlines()[line - 1].strip() if wf.text else ""
    key = next((k for k in reversed(where) if isinstance(k, str)), "value")
    literal = _literal_on_line(raw, value) or value.isoformat()
    # dates here are days: a datetime's fix is its date part
    fix = value.date().isoformat() if isinstance(value, dt.datetime) else value.isoformat()
    hint = f'quote it: "{fix}"' if isinstance(where[-1], int) else f'write {key} = "{fix}"'
    return diag(
        "E002",
        f"'{key}' holds an unquoted TOML {type(value).__name__} {literal}; "
        f"dates are quoted strings here: {hint}",
        wf.shown,
        line,
    )


def _literal_on_line(raw: str, value: Any) -> str | None:
    """The date literal as written on the line (e.g. `2026-01-05`), for a precise hint."""
    head = value.isoformat()[:10] if isinstance(value, dt.date) else value.isoformat()[:5]
    m = re.search(re.escape(head) + r"[^\s,\]}#]*", raw)
    return m.group(0) if m else None
