"""Record, efficiency table and plot of ``bench_cp_layer_scaling.py`` (benchkit does the writing).

Rows are keyed by ``(op, case, provider, cp, phase)`` on top of benchkit's per-device merge, so
the records of a cp 1, a cp 2 and a cp 4 run on the same GPU model combine into one. Parallel
efficiency of a phase at CP ``c`` is ``t_cp1 / (c * t_c)``: 1 when ``c`` ranks each take
``1 / c`` of the one-GPU time (``t`` is the slowest rank's p50).
"""

from __future__ import annotations

from collections import defaultdict

import benchkit

NAME = "cp-layer-scaling"
KEY = ("op", "case", "provider", "cp", "phase")
PHASES = ("gather", "cpkv_ops", "indexer", "attention", "layer")


def efficiency(rows: list[dict]) -> list[dict]:
    """One entry per (device, case, phase, cp) with a cp 1 row of the same device and case."""
    at: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r.get("op") == "cp_layer" and r.get("p50"):
            at[(benchkit.device_label(r), r["case"], r["phase"])][int(r["cp"])] = r["p50"]
    out = []
    for (device, case, phase), by_cp in at.items():
        base = by_cp.get(1)
        for cp, t in sorted(by_cp.items()):
            eff = base / (cp * t) if base else None
            out.append({"device": device, "case": case, "phase": phase, "cp": cp, "p50_us": t,
                        "efficiency": eff})  # fmt: skip
    return out


def table(rows: list[dict]) -> str:
    """case | phase | one ``p50 (efficiency)`` column per CP size present."""
    eff = efficiency(rows)
    cps = sorted({e["cp"] for e in eff})
    cells: dict[tuple, dict[int, str]] = defaultdict(dict)
    for e in eff:
        shown = benchkit.human_time(e["p50_us"], "us")
        if e["efficiency"] is not None and e["cp"] > 1:
            shown += f" ({100 * e['efficiency']:.0f}%)"
        cells[(e["device"], e["case"], e["phase"])][e["cp"]] = shown
    order = {p: i for i, p in enumerate(PHASES)}
    keys = sorted(cells, key=lambda k: (k[0], k[1], order.get(k[2], 99)))
    body = [[d, c, ph, *(cells[(d, c, ph)].get(cp, "-") for cp in cps)] for d, c, ph in keys]
    head = ["device", "case", "phase", *(f"cp {cp} p50 (eff.)" for cp in cps)]
    return benchkit.text_table(head, body)


def figure(rows: list[dict]) -> benchkit.Figure:
    """Per phase: efficiency against CP size, one line per case (and device)."""
    eff = [e for e in efficiency(rows) if e["efficiency"] is not None]
    panels = []
    for phase in PHASES:
        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for e in eff:
            if e["phase"] == phase:
                series[f"{e['case']} ({e['device']})"].append((e["cp"], e["efficiency"]))
        lines = [
            benchkit.Line(label, [x for x, _ in sorted(pts)], [y for _, y in sorted(pts)])
            for label, pts in series.items()
        ]
        panels.append(benchkit.Panel(
            phase, "CP size", "efficiency t1 / (cp * t_cp)", lines,
            hlines=[benchkit.HLine(1.0, "ideal")], ymin=0.0,
        ))  # fmt: skip
    return benchkit.Figure(panels, title="one DSA layer per CP rank: parallel efficiency", ncols=3)


REPORT = benchkit.Report(name=NAME, figure=figure, key=KEY)
