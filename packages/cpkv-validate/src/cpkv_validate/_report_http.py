"""The http engine's report for a reader: a header with what was really compared, one table row
per request, the evidence behind every non-PASS verdict, and a one-line verdict.

The header states the numbers compared (the fewest and most tokens over the requests, counted
from the replies), the rule that told drift from a leak, how the reference was isolated and the
largest number of requests in flight; each row shows every run's token count (the server's own
count beside it where it disagrees), the tokens compared and where the runs first differ.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ._compare import Report, RequestResult

__all__ = ["http_header", "http_notes", "http_summary", "http_table"]

_STYLE = {"PASS": "green", "DRIFT": "yellow", "SHORT": "bold yellow"}


def _requests(report: Report) -> list[RequestResult]:
    return [r for s in report.scenarios for r in s.requests]


def http_header(report: Report) -> list[str]:
    """The title and what was compared, as printed above the table."""
    cfg = report.config
    rows = [r.rows for r in _requests(report)]
    unit = "words" if cfg.get("token_source") == "whitespace-split text" else "tokens"
    lo, hi = (min(rows), max(rows)) if rows else (0, 0)
    compared = f"{lo}" if lo == hi else f"{lo}..{hi}"
    return [
        f"cpkv-validate · engine=http url={cfg.get('url')} model={cfg.get('model')} "
        f"concurrency={cfg.get('concurrency')} (largest in flight: {cfg.get('max_in_flight')})",
        f"compared per request: {compared} {unit} of the first {cfg.get('compare_tokens')} "
        f"generated (at least {cfg.get('min_compared')} needed; {unit} from "
        f"{cfg.get('token_source')}, never usage)",
        f"rule: {cfg.get('drift_rule_text')}",
        f"reference: {cfg.get('reference_isolation')}; run before and after the batch",
    ]


def http_table(report: Report) -> Table:
    """One row per request: each run's tokens (finish), compared, first difference, verdict."""
    table = Table()
    for col, just in (
        ("request", "left"),
        ("marker", "left"),
        ("reference", "right"),
        ("batch", "right"),
        ("reference after", "right"),
        ("compared", "right"),
        ("differing", "right"),
        ("first diff (margin ref/batch)", "right"),
        ("verdict", "left"),
        ("leak (victim ← source)", "left"),
    ):
        table.add_column(col, justify=just)
    for r in _requests(report):
        ev = r.evidence or {}
        div = (r.detail or {}).get("divergence")
        table.add_row(
            r.request,
            r.marker,
            escape(ev.get("reference", "?")),
            escape(ev.get("batch", "?")),
            escape(ev.get("reference_after", "?")),
            str(r.rows),
            str(int(r.max_abs_diff)),
            _diff(div) if isinstance(div, dict) else "—",
            f"[{_STYLE.get(r.verdict, 'bold red')}]{r.verdict}[/]",
            f"{r.request} ← {', '.join(r.leak_sources) or 'unattributed'}"
            if r.verdict == "FAIL"
            else "—",
        )
    return table


def _margin(m: object) -> str:
    return f"{m:.3g}" if isinstance(m, float) else "?"


def _diff(div: dict) -> str:
    return f"{div['position']} ({_margin(div['margin_reference'])}/{_margin(div['margin_other'])})"


def http_notes(report: Report) -> list[str]:
    """The evidence behind each verdict that is not PASS, one line each."""
    out = []
    for r in _requests(report):
        if r.verdict == "PASS":
            continue
        for reason in (r.detail or {}).get("reasons", []):
            out.append(f"{r.request} {r.verdict}: {reason}")
    return out


def http_summary(report: Report) -> str:
    """The verdict line: contamination, not enough evidence, not a batch test, or OK."""
    cfg, rows = report.config, _requests(report)
    n, wall = len(rows), f"{report.wall_s:.1f}s"
    failed = [r for r in rows if r.verdict == "FAIL"]
    if failed:
        leaks = ", ".join(
            f"{r.request} ← {', '.join(r.leak_sources) or 'unattributed'}" for r in failed
        )
        return f"[bold red]CONTAMINATION[/]: {len(failed)}/{n} requests ({leaks}); {wall}"
    short = [r for r in rows if r.verdict == "SHORT"]
    if short:
        return (
            f"[bold yellow]NOT ENOUGH EVIDENCE[/]: {len(short)}/{n} requests compared fewer "
            f"than {cfg.get('min_compared')} tokens; {wall}"
        )
    if int(cfg.get("max_in_flight") or 0) < 2:
        return (
            f"[bold yellow]NOT A BATCH TEST[/]: at most {cfg.get('max_in_flight')} request was in "
            f"flight at once; {wall}"
        )
    drift = sum(r.verdict == "DRIFT" for r in rows)
    also = f"; {drift} DRIFT (a near-tie, not compared after it)" if drift else ""
    return f"[bold green]OK[/]: {n} requests match batch size 1{also}; {wall}"
