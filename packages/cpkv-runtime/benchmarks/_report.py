"""Table, JSON and PNG output of bench_runtime.py (kept apart from the timing code)."""

from __future__ import annotations

import datetime
import json
import platform
from collections import defaultdict
from pathlib import Path

import cpkv_runtime as cr
import torch

NAME = "cpkv-runtime"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def metadata(device: torch.device, copy_bw: float, command: str) -> dict:
    """Fields every row carries: where, with what, when, how."""
    on_cuda = device.type == "cuda"
    return {
        "device": "cuda" if on_cuda else "cpu",
        "gpu_name": torch.cuda.get_device_name(device) if on_cuda else None,
        "cpu": _cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "pkg_version": cr.__version__,
        "copy_bw_gbps": copy_bw / 1e9,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
    }


def _fmt_us(us: float) -> str:
    return f"{us / 1000:.2f}ms" if us >= 1000 else f"{us:.1f}us"


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
            f"{p} {_fmt_us(r['p50'])} [{_fmt_us(r['p20'])}-{_fmt_us(r['p80'])}]"
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


def write(rows: list[dict], out_dir: Path, merge: str | None, device: str) -> None:
    """Write JSON (keeping other devices' rows from ``merge``) and the PNG."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kept = []
    if merge and Path(merge).exists():
        kept = [r for r in json.loads(Path(merge).read_text())["rows"] if r["device"] != device]
    all_rows = kept + rows
    path = out_dir / f"{NAME}.json"
    path.write_text(json.dumps({"benchmark": NAME, "rows": all_rows}, indent=1) + "\n")
    print(f"wrote {path}")
    plot(all_rows, out_dir / f"{NAME}.png")


def plot(rows: list[dict], path: Path) -> None:
    """p50 per case, one panel per op, one line per (device, provider, row width)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: {path} not written (re-plot later with --plot-only)")
        return
    ops = [
        "plan_layout",
        "build_inverse",
        "materialize",
        "fill_current",
        "remap_locs",
        "current_page_mask",
    ]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for ax, op in zip(axes.flat, ops, strict=True):
        mine = [r for r in rows if r["op"] == op]
        order = sorted({(r["B"] * r["tokens_per_req"], r["B"], r["case"]) for r in mine})
        where = {case: i for i, (_, _, case) in enumerate(order)}
        lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for r in mine:
            width = f" {r['row_bytes']}B" if r["row_bytes"] else ""
            lines[f"{r['device']} {r['provider']}{width}"].append((where[r["case"]], r["p50"]))
        for label, pts in sorted(lines.items()):
            xs, ys = zip(*sorted(pts), strict=True)
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xticks(range(len(order)), [c for _, _, c in order], rotation=30, ha="right")
        ax.set(title=op, yscale="log", ylabel="p50 (us)")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
        if lines:
            ax.legend(fontsize=7)
    fig.suptitle("cpkv-runtime ops (P=64); p50 per call")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
