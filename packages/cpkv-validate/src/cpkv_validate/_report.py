"""Render a :class:`Report`: a rich table on the terminal, a JSON file for machines."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ._compare import Report

__all__ = ["print_report", "write_json"]


def _fmt_diff(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2e}"


def _source(r) -> str:
    if not r.leak_sources:
        return "—" if r.verdict == "PASS" else "unattributed"
    return ", ".join(r.leak_sources)


def print_report(report: Report, console: Console | None = None) -> None:
    """One row per (scenario, request): max abs diff, verdict, and the request that leaked in."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # pipes and CI logs: do not squeeze the table into 80 columns
            console = Console(width=max(console.width, 120))
    cfg = report.config
    http = cfg.get("engine") == "http"
    if http:
        title = (
            f"cpkv-validate · engine=http url={cfg.get('url')} model={cfg.get('model')} "
            f"concurrency={cfg.get('concurrency')} (diff = differing generated tokens)"
        )
    else:
        title = (
            f"cpkv-validate · engine=reference cp={cfg.get('cp')} split={cfg.get('split')} "
            f"inverse={cfg.get('inverse')} device={cfg.get('device')} dtype={cfg.get('dtype')}"
        )
    table = Table()
    table.add_column("scenario")
    table.add_column("request")
    table.add_column("marker", justify="right")
    table.add_column("rows", justify="right")
    table.add_column("tokens differing" if http else "max abs diff", justify="right")
    table.add_column("verdict")
    table.add_column("leak source")
    for sc in report.scenarios:
        for i, r in enumerate(sc.requests):
            style = "green" if r.verdict == "PASS" else "bold red"
            table.add_row(
                sc.name if i == 0 else "",
                r.request,
                r.marker,
                str(r.rows),
                str(int(r.max_abs_diff)) if http else _fmt_diff(r.max_abs_diff),
                f"[{style}]{r.verdict}[/]",
                _source(r),
                end_section=i == len(sc.requests) - 1,
            )
    console.print(f"[bold]{title}[/]")
    console.print(table)
    bad = [s.name for s in report.scenarios if not s.ok]
    n = sum(len(s.requests) for s in report.scenarios)
    if bad:
        console.print(
            f"[bold red]CONTAMINATION[/] in {len(bad)}/{len(report.scenarios)} scenarios "
            f"({', '.join(bad)}); tolerance {cfg.get('tolerance')}; {report.wall_s:.1f}s"
        )
    else:
        console.print(
            f"[bold green]OK[/]: {n} requests in {len(report.scenarios)} scenarios match batch "
            f"size 1 (tolerance {cfg.get('tolerance')}); {report.wall_s:.1f}s"
        )


def write_json(report: Report, path: str | Path) -> None:
    """Write the report (config, per-request results, leaks) as indented JSON."""
    Path(path).write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
