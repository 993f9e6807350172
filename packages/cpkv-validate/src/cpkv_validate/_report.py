"""Render a :class:`Report`: a rich table on the terminal, a JSON file for machines."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ._compare import Report, ScenarioResult

__all__ = ["print_report", "write_json"]


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


_STYLE = {"PASS": "green", "SHORT": "bold yellow"}


def _http_table(report: Report) -> Table:
    """One row per request: its evidence, the token positions compared and differing, verdict.

    ``compared`` counts the positions looked at (the first ``--compare-tokens`` either run
    produced) and ``differing`` those among them that differ, so differing <= compared.
    """
    table = Table()
    for col, just in (
        ("scenario", "left"),
        ("request", "left"),
        ("marker", "right"),
        ("alone: tokens (finish)", "right"),
        ("batch: tokens (finish)", "right"),
        ("positions compared", "right"),
        ("differing", "right"),
        ("verdict", "left"),
        ("leak source", "left"),
    ):
        table.add_column(col, justify=just)
    for sc in report.scenarios:
        for i, r in enumerate(sc.requests):
            evidence = r.evidence or {}
            table.add_row(
                sc.name if i == 0 else "",
                r.request,
                r.marker,
                evidence.get("alone", "?"),
                evidence.get("batch", "?"),
                str(r.rows),
                str(int(r.max_abs_diff)),
                f"[{_STYLE.get(r.verdict, 'bold red')}]{r.verdict}[/]",
                _source(r) if r.verdict == "FAIL" else "—",
                end_section=i == len(sc.requests) - 1,
            )
    return table


class _PipeConsole(Console):
    """A console that stops printing when its reader goes (``| head``), without exiting.

    rich's own answer to a broken pipe is ``SystemExit(1)``, which would report contamination
    for a run that found none; the command's exit status must stay its own.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.file.fileno())
        except (AttributeError, OSError, ValueError):  # a file object without a descriptor
            pass
        finally:
            os.close(devnull)


def print_report(report: Report, console: Console | None = None) -> None:
    """The table (one row per scenario run, or per request for http) and a one-line verdict."""
    if console is None:
        console = _PipeConsole()
        if not console.is_terminal:  # pipes and CI logs: do not squeeze the table into 80 columns
            console = _PipeConsole(width=max(console.width, 150))
    cfg = report.config
    if cfg.get("engine") == "http":
        n = cfg.get("compare_tokens", cfg.get("max_tokens"))
        title = (
            f"cpkv-validate · engine=http url={cfg.get('url')} model={cfg.get('model')} "
            f"concurrency={cfg.get('concurrency')} (first {n} greedy tokens compared)"
        )
        table = _http_table(report)
    else:
        title = (
            f"cpkv-validate · engine=reference inverse={cfg.get('inverse')} "
            f"device={cfg.get('device')} dtype={cfg.get('dtype')} cp={cfg.get('cp')}"
        )
        if cfg.get("sglang_offsets"):
            title += f" sglang-offsets={cfg['sglang_offsets']}"
        table = _reference_table(report)
    console.print(f"[bold]{title}[/]")
    console.print(table)
    bad = [s for s in report.scenarios if any(r.verdict == "FAIL" for r in s.requests)]
    short = report.verdicts("SHORT")
    runs, n = len(report.scenarios), sum(len(s.requests) for s in report.scenarios)
    if bad:
        names = ", ".join(dict.fromkeys(s.name for s in bad))
        console.print(
            f"[bold red]CONTAMINATION[/] in {len(bad)}/{runs} scenario runs ({names}); "
            f"tolerance {cfg.get('tolerance')}; {report.wall_s:.1f}s"
        )
    elif short:
        console.print(
            f"[bold yellow]NO EVIDENCE[/]: {len(short)}/{n} requests generated fewer than "
            f"{cfg.get('max_tokens')} tokens without finish reason 'stop' (or nothing to "
            f"compare); {report.wall_s:.1f}s"
        )
    else:
        console.print(
            f"[bold green]OK[/]: {n} requests in {runs} scenario runs match batch size 1 "
            f"(tolerance {cfg.get('tolerance')}); {report.wall_s:.1f}s"
        )


def write_json(report: Report, path: str | Path) -> None:
    """Write the report (config, per-request results, leaks) as indented JSON.

    Through a temporary file in the same directory, renamed over ``path``: a failed write (disk
    full, say) leaves the file that was there.
    """
    path = Path(path)
    text = json.dumps(report.to_dict(), indent=2, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:32]}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
