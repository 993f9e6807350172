"""Rules on one work item: lifecycle, dates, file name, placeholders, the #:schema line.

Each `rule_*` takes a parsed `WorkFile` and returns its diagnostics. Rules read the document
defensively: a value of the wrong type or an invalid date has already been reported by the
schema, so a rule skips it rather than report the same problem twice.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from typing import Any

from govctl._compile import is_date
from govctl._diagnostics import Diagnostic
from govctl._load import WorkFile

Rule = Callable[[WorkFile], Iterator[Diagnostic]]

SCHEMA_LINE = "#:schema ../schema/work.schema.json"
# the schema's `work_id` and `ref` patterns (a test keeps them equal to work.schema.json's)
ID_PATTERN = r"WI-\d{4}-\d{2}-\d{2}-(?:[a-f0-9]{4}(?:-\d{3})?|\d{3})"
REF_PATTERN = rf"RFC-\d{{4}}(?::C-[A-Z][A-Z0-9-]*)?|ADR-\d{{4}}|{ID_PATTERN}"
ID_RE = re.compile(ID_PATTERN)
_PLACEHOLDER_WORD = r"(?:todo|tbd|tbc|fixme|xxx|wip|placeholder|fill in later|n/?a)"
PLACEHOLDER_RE = re.compile(
    rf"(?is)\s*(?:{_PLACEHOLDER_WORD}|\[\s*{_PLACEHOLDER_WORD}\s*\]|\.\.\.|…|-+|lorem ipsum.*"
    r"|todo:.*|describe (?:the|this) work.*|<[^>]*>)?\s*[.!]?\s*"
)
# the questions of upstream's template: a description that still holds all of them is one
TEMPLATE_QUESTIONS = (
    "describe the work to be done",
    "what is the goal?",
    "what are the acceptance",
)
# status -> (dates it needs, dates it must not have); upstream enforces this only in `move`.
NEEDS = {
    "queue": (),
    "active": ("started",),
    "done": ("started", "completed"),
    "cancelled": ("completed",),
}
FORBIDS = {"queue": ("started", "completed"), "active": ("completed",), "done": (), "cancelled": ()}


def date_of(v: Any) -> dt.date | None:
    """A valid "YYYY-MM-DD" string as a date; None for anything else (reported by the schema)."""
    if type(v) is str and len(v) == 10 and is_date(v):
        return dt.date.fromisoformat(v)
    return None


def _status(wf: WorkFile) -> str | None:
    s = wf.get("govctl", "status")
    return s if isinstance(s, str) and s in NEEDS else None


def _list(wf: WorkFile, table: str, key: str) -> list[Any]:
    v = wf.get(table, key)
    return v if isinstance(v, list) else []


def criteria_of(wf: WorkFile) -> list[dict[str, Any]]:
    """The acceptance criteria tables (malformed entries, reported by the schema, are skipped)."""
    return [c for c in _list(wf, "content", "acceptance_criteria") if isinstance(c, dict)]


def rule_status_dates(wf: WorkFile) -> Iterator[Diagnostic]:
    """E011 a date the status needs is missing; E013 a date the status forbids is present."""
    status = _status(wf)
    if status is None:
        return
    for key in NEEDS[status]:
        if wf.get("govctl", key) is None:
            yield wf.diag(
                "E011",
                f"status '{status}' needs '{key}' (`govctl work move` stamps it)",
                "govctl",
                "status",
            )
    for key in FORBIDS[status]:
        if wf.get("govctl", key) is not None:
            yield wf.diag("E013", f"status '{status}' must not have '{key}'", "govctl", key)


def rule_date_order(wf: WorkFile) -> Iterator[Diagnostic]:
    """E012 created <= started <= completed (each pair compared when both are valid dates)."""
    keys = ("created", "started", "completed")
    dates = {k: date_of(wf.get("govctl", k)) for k in keys}
    for i, later in enumerate(keys):
        for earlier in reversed(keys[:i]):
            a, b = dates[earlier], dates[later]
            if a is not None and b is not None:
                if b < a:
                    yield wf.diag(
                        "E012", f"'{later}' ({b}) precedes '{earlier}' ({a})", "govctl", later
                    )
                break  # compare with the nearest earlier date only: one diagnostic per problem


def rule_done_criteria(wf: WorkFile) -> Iterator[Diagnostic]:
    """E014 done needs >= 1 acceptance criterion; E015 none of them may still be pending."""
    if _status(wf) != "done":
        return
    crit = criteria_of(wf)
    if not crit:
        yield wf.diag(
            "E014",
            "status 'done' needs at least one [[content.acceptance_criteria]]",
            "govctl",
            "status",
        )
    for i, c in enumerate(crit):
        if c.get("status", "pending") == "pending":
            text = str(c.get("text", ""))[:60]
            yield wf.diag(
                "E015",
                f"criterion {i + 1} ('{text}') is pending but the item is 'done' "
                "(tick it: `govctl work tick ID PATTERN`)",
                "content",
                "acceptance_criteria",
                i,
                "status",
            )


def rule_journal_dates(wf: WorkFile) -> Iterator[Diagnostic]:
    """E016 every journal date lies within created..completed."""
    lo, hi = date_of(wf.get("govctl", "created")), date_of(wf.get("govctl", "completed"))
    for i, entry in enumerate(_list(wf, "content", "journal")):
        d = date_of(entry.get("date")) if isinstance(entry, dict) else None
        if d is None:
            continue
        if lo is not None and d < lo:
            why = f"predates 'created' ({lo})"
        elif hi is not None and d > hi:
            why = f"is after 'completed' ({hi})"
        else:
            continue
        yield wf.diag("E016", f"journal entry {i + 1} ({d}) {why}", "content", "journal", i, "date")


def rule_file_name(wf: WorkFile) -> Iterator[Diagnostic]:
    """E017 the file is named <ID date>-<slug>.toml."""
    item_id = wf.item_id
    if item_id is None or not ID_RE.fullmatch(item_id):
        return
    day, name = item_id[3:13], wf.path.name  # WI-YYYY-MM-DD-...
    if not name.startswith(day + "-") or not name.endswith(".toml"):
        yield wf.diag(
            "E017",
            f"file name '{name}' should start with the ID's date: {day}-<slug>.toml",
            "govctl",
            "id",
        )


def rule_placeholder(wf: WorkFile) -> Iterator[Diagnostic]:
    """W001 the description is empty or template text."""
    d = wf.get("content", "description")
    if not isinstance(d, str):
        return
    if PLACEHOLDER_RE.fullmatch(d) or all(q in d.lower() for q in TEMPLATE_QUESTIONS):
        msg = f"placeholder description {d.strip()[:40]!r}; say what and why"
        yield wf.diag("W001", msg, "content", "description")


def rule_schema_line(wf: WorkFile) -> Iterator[Diagnostic]:
    """W002 the first line points editors at the schema."""
    first = wf.text.split("\n", 1)[0]
    if not (first.startswith("#:schema ") and "work.schema.json" in first):
        yield wf.diag("W002", f"first line should be `{SCHEMA_LINE}`")


RULES: tuple[Rule, ...] = (
    rule_schema_line,
    rule_status_dates,
    rule_date_order,
    rule_done_criteria,
    rule_journal_dates,
    rule_file_name,
    rule_placeholder,
)
