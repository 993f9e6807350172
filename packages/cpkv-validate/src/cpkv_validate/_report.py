"""Render a :class:`Report`: a rich table for a reader, JSON for machines.

The table is rendered to text first and then written through ``cpkv_cli.emit``: a reader that
closes stdout early ends it quietly, while a full disk or a stdout closed from the start is one
line and exit 2. Before, rich wrote it: ``>&-`` lost the report with exit 0.
"""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from typing import TextIO

from cpkv_cli import emit
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._compare import Report, ScenarioResult
from ._json_target import JsonTarget, json_target, write_text
from ._report_http import http_header, http_notes, http_summary, http_table

__all__ = ["json_text", "layout", "print_report", "render_report", "write_json"]


def _fmt_diff(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2e}"


def _source(r) -> str:
    if not r.leak_sources:
        return "—" if r.verdict == "PASS" else "unattributed"
    return ", ".join(r.leak_sources)


def _leaks(sc: ScenarioResult) -> str:
    bad = [r for r in sc.requests if r.verdict != "PASS"]
    return ", ".join(f"{r.request} ← {_source(r)}" for r in bad) or "—"


def _reference_table(report: Report) -> Table:
    """One row per scenario run (cp, split, allocator); failing requests name their source."""
    table = Table()
    for col, just in (
        ("scenario", "left"),
        ("cp", "right"),
        ("split", "left"),
        ("allocator", "left"),
        ("requests", "right"),
        ("rows", "right"),
        ("max abs diff", "right"),
        ("verdict", "left"),
        ("leaks (victim ← source)", "left"),
    ):
        table.add_column(col, justify=just)
    runs = report.scenarios
    for i, sc in enumerate(runs):
        first = i == 0 or runs[i - 1].name != sc.name
        last = i == len(runs) - 1 or runs[i + 1].name != sc.name
        style = "green" if sc.ok else "bold red"
        table.add_row(
            sc.name if first else "",
            str(sc.cp),
            str(sc.split),
            str(sc.allocator),
            str(len(sc.requests)),
            str(sum(r.rows for r in sc.requests)),
            _fmt_diff(max((r.max_abs_diff for r in sc.requests), default=0.0)),
            f"[{style}]{'PASS' if sc.ok else 'FAIL'}[/]",
            _leaks(sc),
            end_section=last,
        )
    return table


def _reference_title(report: Report) -> str:
    cfg = report.config
    title = (
        f"cpkv-validate · engine=reference inverse={cfg.get('inverse')} "
        f"device={cfg.get('device')} dtype={cfg.get('dtype')} cp={cfg.get('cp')}"
    )
    if cfg.get("sglang_offsets"):
        title += f" sglang-offsets={cfg['sglang_offsets']}"
    return title


def _reference_summary(report: Report) -> str:
    cfg = report.config
    bad = [s for s in report.scenarios if any(r.verdict == "FAIL" for r in s.requests)]
    runs, n = len(report.scenarios), sum(len(s.requests) for s in report.scenarios)
    if bad:
        names = ", ".join(dict.fromkeys(s.name for s in bad))
        return (
            f"[bold red]CONTAMINATION[/] in {len(bad)}/{runs} scenario runs ({names}); "
            f"tolerance {cfg.get('tolerance')}; {report.wall_s:.1f}s"
        )
    return (
        f"[bold green]OK[/]: {n} requests in {runs} scenario runs match batch size 1 "
        f"(tolerance {cfg.get('tolerance')}); {report.wall_s:.1f}s"
    )


def _print_into(console: Console, report: Report) -> None:
    if report.config.get("engine") == "http":
        title, *lines = http_header(report)
        console.print(f"[bold]{escape(title)}[/]")
        for line in lines:
            console.print(escape(line))
        console.print(http_table(report))
        for note in http_notes(report):
            console.print(escape(note))
        console.print(http_summary(report))
        return
    console.print(f"[bold]{_reference_title(report)}[/]")
    console.print(_reference_table(report))
    console.print(_reference_summary(report))


def render_report(report: Report, *, width: int = 200, color: bool = False) -> str:
    """The report as text: the table (one row per scenario run, or per request for http), what
    backs each verdict that is not PASS, and a one-line verdict; ANSI colours when ``color``."""
    buf = io.StringIO()
    console = Console(
        file=buf, width=width, force_terminal=color, color_system="standard" if color else None
    )
    _print_into(console, report)
    return buf.getvalue()


def print_report(report: Report, console: Console | None = None) -> None:
    """Print :func:`render_report` to stdout (through ``cpkv_cli.emit``: a reader that left ends
    it quietly, a full disk or a closed stdout is an ``OutputError``), or into ``console``."""
    if console is not None:
        _print_into(console, report)
        return
    emit(render_report(report, **layout(sys.stdout)).rstrip("\n"))


def layout(stream: TextIO | None) -> dict[str, object]:
    """Width and colour for ``stream``: a terminal's own; else 200 columns (pipes and CI logs:
    the table is not squeezed into 80), no colour."""
    if stream is None:
        return {"width": 200, "color": False}
    probe = Console(file=stream)
    if probe.is_terminal:
        return {"width": probe.width, "color": True}
    return {"width": max(probe.width, 200), "color": False}


def json_text(report: Report) -> str:
    """The report (config, per-request results, outputs, leaks) as indented JSON."""
    return json.dumps(report.to_dict(), indent=2, default=str) + "\n"


def write_json(report: Report, path: str | Path | JsonTarget) -> None:
    """Write :func:`json_text` to ``path`` (``-``: stdout; a regular file: through a temporary
    file renamed over it, so a failed write leaves the file that was there; see
    ``_json_target``)."""
    target = path if isinstance(path, JsonTarget) else json_target(str(path))
    write_text(target, json_text(report))
