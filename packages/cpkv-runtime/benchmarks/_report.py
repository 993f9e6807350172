"""The tables and plot of bench_runtime.py (its own columns; benchkit does the writing)."""

from __future__ import annotations

from collections import defaultdict

import benchkit

NAME = "cpkv-runtime"
INDEX_OPS = ("plan_layout", "build_inverse", "current_page_mask")
PLOTTED_OPS = (
    "plan_layout",
    "build_inverse",
    "materialize",
    "fill_current",
    "remap_locs",
    "current_page_mask",
)


def print_table(rows: list[dict]) -> None:
    """One line per (op, case, row width): providers side by side, ratio and bandwidth."""
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        groups[(r["op"], r["case"], r["row_bytes"])][r["provider"]] = r
    meta = rows[0] if rows else {}
    where = meta.get("gpu_name") or meta.get("cpu")
    print(
        f"# cpkv-runtime ops on {where}, torch {meta.get('torch')}, "
        f"copy {meta.get('copy_bw_gbps', 0):.0f} GB/s"
    )
    for (op, case, width), by in groups.items():
        cells = [
            f"{p} {_t(r['p50'])} [{_t(r['p20'])}-{_t(r['p80'])}]".replace(" µs", "us")
            for p, r in by.items()
        ]
        line = f"{op:<18} {case:<34} {f'row={width}B' if width else '':<10} | " + " | ".join(cells)
        base = by.get("torch")
        fastest = min(by.values(), key=lambda r: r["p50"])
        if base and fastest is not base:
            line += f" | {base['p50'] / fastest['p50']:.1f}x vs torch"
        if fastest.get("gbps"):
            line += f" | {fastest['gbps']:.1f} GB/s ({100 * fastest['copy_fraction']:.0f}% of copy)"
        if "materialized_bytes" in fastest:
            line += f" | {fastest['materialized_bytes'] / 2**20:.0f} MiB materialised"
        print(line)


def _t(us: float | None) -> str:
    return benchkit.human_time(us, "us")


def _gbps(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _spread(r: dict | None) -> str:
    return "n/a" if r is None else f"{_t(r['p50'])} [{_t(r['p20'])}–{_t(r['p80'])}]"


def _index(rows: list[dict], provider: str) -> dict[tuple, dict]:
    return {(r["op"], r["case"], r["row_bytes"]): r for r in rows if r["provider"] == provider}


def index_table(rows: list[dict], provider: str = "torch") -> str:
    """p50 of the index ops per case, remap with its location count and bandwidth."""
    at = _index(rows, provider)
    lines = []
    for case in dict.fromkeys(r["case"] for r in rows if r["op"] == "remap_locs"):
        remap = at.get(("remap_locs", case, 0))
        shape = "×".join(map(str, remap["locs_shape"])) if remap else "?"
        lines.append([
            case, *(_t(at[(op, case, 0)]["p50"]) if (op, case, 0) in at else "n/a"
                    for op in INDEX_OPS),
            f"{_t(remap['p50'])} ({shape})" if remap else "n/a",
            _gbps(remap["gbps"]) if remap else "-",
        ])  # fmt: skip
    head = ["case", *INDEX_OPS, "remap_locs (locations)", "remap GB/s"]
    return benchkit.markdown_table(head, lines)


def copy_table(rows: list[dict], provider: str = "torch") -> str:
    """materialize and fill_current per case and row width: p50 [p20–p80] and bandwidth."""
    at = _index(rows, provider)
    lines = []
    for r in rows:
        if r["op"] != "materialize" or r["provider"] != provider:
            continue
        fill = at.get(("fill_current", r["case"], r["row_bytes"]))
        share = f" ({100 * r['copy_fraction']:.0f}%)" if r.get("copy_fraction") else ""
        lines.append([
            r["case"], f"{r['row_bytes']} B", _spread(r), _gbps(r["gbps"]) + share,
            _spread(fill), _gbps(fill["gbps"]) if fill else "-",
        ])  # fmt: skip
    head = [
        "case", "row", "materialize p50 [p20–p80]", "GB/s (% of copy)",
        "fill_current p50 [p20–p80]", "GB/s",
    ]  # fmt: skip
    return benchkit.markdown_table(head, lines)


def dedup_table(rows: list[dict], provider: str = "torch") -> str:
    """Slots, bytes and p50 to materialise a shared prefix with and without dedup, per row."""
    found = {
        (r["row_bytes"], r["dedup"]): r
        for r in rows
        if r["op"] == "materialize_dedup" and r["provider"] == provider
    }
    lines = []
    for width in dict.fromkeys(w for w, _ in found):
        on, off = found.get((width, True)), found.get((width, False))
        if on is None or off is None:
            continue
        cells = [
            f"{x['num_slots']} / {x['materialized_bytes'] / 2**20:.0f} MiB / {_t(x['p50'])}"
            for x in (on, off)
        ]
        saved = off["materialized_bytes"] / on["materialized_bytes"]
        lines.append([f"{width} B", *cells, f"{saved:.2f}×", f"{off['p50'] / on['p50']:.2f}×"])
    head = [
        "row", "dedup on: slots / bytes / p50", "dedup off: slots / bytes / p50", "bytes saved",
        "time saved",
    ]  # fmt: skip
    return benchkit.markdown_table(head, lines)


def sections(rows: list[dict]) -> dict[str, str]:
    """The three tables of each device, as generated sections of cpkv-runtime.md."""
    out = {}
    by_dev: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_dev[benchkit.device_label(r)].append(r)
    for dev, mine in by_dev.items():
        out[f"{NAME} {dev} index ops"] = index_table(mine)
        out[f"{NAME} {dev} row copies"] = copy_table(mine)
        out[f"{NAME} {dev} dedup"] = dedup_table(mine)
    return out


def figure(rows: list[dict]) -> benchkit.Figure:
    """p50 per case, one panel per op, one line per (device, provider, row width)."""
    panels = []
    for op in PLOTTED_OPS:
        mine = [r for r in rows if r["op"] == op]
        order = sorted({(r["B"] * r["tokens_per_req"], r["B"], r["case"]) for r in mine})
        where = {case: i for i, (_, _, case) in enumerate(order)}

        def label(r: dict) -> str:
            width = f" {r['row_bytes']}B" if r["row_bytes"] else ""
            return f"{r['device']} {r['provider']}{width}"

        lines = benchkit.lines_from_rows(mine, x=lambda r, at=where: at[r["case"]], label=label)
        ticks = [case for _, _, case in order]
        panels.append(benchkit.Panel(op, "", "p50 (us)", lines, yscale="log", xticks=ticks))
    return benchkit.Figure(
        panels, title="cpkv-runtime ops (P=64); p50 per call", ncols=3, panel_size=(5.3, 4.5)
    )


REPORT = benchkit.Report(
    name=NAME, figure=figure, sections=sections, key=("op", "case", "provider", "row_bytes")
)
