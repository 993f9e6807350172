"""Every cpkv kernel against the torch reference, side by side in one run.

    python packages/cpkv-kernels/benchmarks/bench_kernels.py --out "$OUT"              # H200
    python packages/cpkv-kernels/benchmarks/bench_kernels.py --device cpu --out /tmp/k  # CPU smoke
    python packages/cpkv-kernels/benchmarks/bench_kernels.py --render \\
        --md docs/benchmarks/cpkv-kernels.md                       # redraw the record, no timing

Providers: ``torch`` (cpkv_runtime's torch backend, the reference), ``triton``, ``cuda``, the
obvious plain-torch alternative (``index_select`` / ``index_copy_``) and ``copy`` (a contiguous
device-to-device copy of the same bytes: the bandwidth ceiling, also measured once at 1 GiB as the
``copy_ceiling`` row). Timing modes on CUDA: ``eager`` = CUDA events around one call with L2
flushed before each (60 ms of calls after 10 ms of warm-up), ``graph`` = k calls captured in one
CUDA graph and replayed 15 times, ``host`` = wall clock of 40 back-to-back calls (5 samples). On CPU
(``--device cpu``, the default without CUDA) it is a smoke run: torch and interpreted Triton at
toy sizes, ``host`` mode only.

Merges its rows into ``<out>/cpkv-kernels.json`` (rows of other devices, and of cases not run
again, are kept), draws ``cpkv-kernels.png``, prints the tables and, with ``--md``, rewrites the
tables of that record.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before anything imports triton: its kernels run on CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

import benchkit
from _bench_cases import SIZES, cases, load_ops

NAME = "cpkv-kernels"
COPY_OP = "copy_ceiling"
BANDWIDTH_OPS = ("materialize", "fill_current", "remap_locs")
PLOTTED_OPS = ("materialize", "fill_current")
PROVIDERS = ("torch", "triton", "cuda", "index_select", "index_copy_", "copy")
COLORS = {"torch": "C3", "triton": "C4", "cuda": "C1", "index_select": "C2", "index_copy_": "C2"}
REMAP_GOAL_CASE = "[16384,2048] int32 B=8"
Timer = Callable[[Callable[[], object]], list[float]]


def timers(dev: str) -> dict[str, Timer]:
    """Timing mode -> timer (samples in seconds) for ``dev``; the first is the copy ceiling's."""
    if dev.startswith("cuda"):
        sync = torch.cuda.synchronize
        return {
            "eager": lambda fn: benchkit.cuda_event_times(
                fn, budget_s=0.06, warmup_s=0.01, flush_l2=True
            ),
            "graph": lambda fn: benchkit.cuda_graph_times(fn),
            "host": lambda fn: benchkit.wall_times(fn, reps=5, warmup=3, calls=40, sync=sync),
        }
    return {"host": lambda fn: benchkit.wall_times(fn, reps=3, warmup=1)}


def copy_case(nbytes: int) -> str:
    size = "1 GiB" if nbytes == 2**30 else f"{nbytes // 2**20} MiB"
    return f"{size} uint8 copy_, read + write"


def copy_ceiling(dev: str, env: dict) -> dict:
    """The device-to-device copy ceiling, measured now (1 GiB on CUDA, 16 MiB on CPU)."""
    nbytes = 2**30 if dev.startswith("cuda") else 2**24
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    mode, timer = next(iter(timers(dev).items()))
    q = benchkit.quantiles(timer(lambda: dst.copy_(src))).to("us")
    return {
        "op": COPY_OP, "case": copy_case(nbytes), "provider": "copy", "mode": mode, **q,
        "bytes_moved": 2 * nbytes, "tbps": 2 * nbytes / (q["p50"] * 1e-6) / 1e12,
        "parity": None, "note": "", "meta": {}, **env,
    }  # fmt: skip


def measure(size: str, dev: str, ops: dict, env: dict) -> list[dict]:
    """One row per (op, case, provider, timing mode), plus the copy ceiling's row."""
    torch.manual_seed(0)
    rows = [copy_ceiling(dev, env)]
    for op, case, meta, setup in cases(size, dev):
        try:
            provs, nbytes, parity = setup(ops)
        except Exception as exc:
            print(
                f"SKIPPED {op} {case}: setup failed: {type(exc).__name__}: {exc}", file=sys.stderr
            )
            continue
        for prov, fn in provs.items():
            for mode, timer in timers(dev).items():
                try:
                    q = benchkit.quantiles(timer(fn)).to("us")
                    note = ""
                except Exception as exc:  # e.g. the torch reference syncs and cannot be captured
                    q = {"p50": None, "p20": None, "p80": None, "unit": "us"}
                    note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                tbps = nbytes / (q["p50"] * 1e-6) / 1e12 if q["p50"] else None
                rows.append({
                    "op": op, "case": case, "provider": prov, "mode": mode, **q,
                    "bytes_moved": nbytes, "tbps": tbps, "parity": parity.get(prov),
                    "note": note, "meta": dict(meta), **env,
                })  # fmt: skip
        del provs
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
        print(f"done {op} {case}: parity {parity}", file=sys.stderr, flush=True)
    return rows


def by_device(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(benchkit.device_label(r), []).append(r)
    return out


def _index(rows: list[dict]) -> dict[tuple, dict]:
    return {(r["op"], r["case"], r["provider"], r["mode"]): r for r in rows}


def copy_tbps(rows: list[dict]) -> float:
    """The copy ceiling of one device's rows (TB/s, bytes read + written)."""
    found = [r["tbps"] for r in rows if r["op"] == COPY_OP]
    if not found:
        raise ValueError(f"no {COPY_OP} row for {benchkit.device_label(rows[0])}: re-run it")
    return found[0]


def _cases(rows: list[dict]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["op"], r["case"]) for r in rows if r["op"] != COPY_OP))


def table(rows: list[dict], mode: str, markdown: bool = True) -> str:
    """p50 per provider, speed-ups over torch, TB/s against the copy ceiling: one device's rows."""
    ceiling, at = copy_tbps(rows), _index(rows)
    head = [
        "op", "case", "torch us", "triton us", "cuda us", "alt us", "copy us", "cuda x torch",
        "triton x torch", "cuda TB/s (% copy)", "triton TB/s (% copy)", "parity",
    ]  # fmt: skip
    lines = []
    for op, case in _cases(rows):
        g = {p: at.get((op, case, p, mode)) for p in PROVIDERS}
        alt = g["index_select"] or g["index_copy_"]
        t, c, tr = g["torch"], g["cuda"], g["triton"]

        def bw(r: dict | None, op: str = op) -> str:
            if r is None or not r["tbps"] or op not in BANDWIDTH_OPS:
                return "-"
            return f"{r['tbps']:.2f} ({100 * r['tbps'] / ceiling:.0f}%)"

        kernels = [r for r in (tr, c) if r is not None]
        ok = "yes" if kernels and all(r["parity"] for r in kernels) else "NO"
        lines.append([
            op, case, _us(t), _us(tr), _us(c), _us(alt), _us(g["copy"]), _ratio(t, c),
            _ratio(t, tr), bw(c), bw(tr), ok,
        ])  # fmt: skip
    if markdown:
        return benchkit.markdown_table(head, lines)
    return benchkit.text_table(head, lines)


def _us(r: dict | None) -> str:
    return "n/a" if r is None or r["p50"] is None else f"{r['p50']:.1f}"


def _ratio(a: dict | None, b: dict | None) -> str:
    return f"{a['p50'] / b['p50']:.1f}x" if a and b and a["p50"] and b["p50"] else "n/a"


def goals(rows: list[dict]) -> dict[str, object]:
    """Where each op stands against its performance goal, from one device's rows."""
    ceiling, at = copy_tbps(rows), _index(rows)
    bw = {
        f"{r['op']} {r['case']} {r['provider']} {r['mode']}": round(r["tbps"] / ceiling, 3)
        for r in rows
        if r["mode"] in ("eager", "graph")
        and r["op"] in ("materialize", "fill_current")
        and r["provider"] in ("cuda", "triton")
        and r["tbps"]
        and r["bytes_moved"] / 2 >= 64 * 2**20
    }
    remap = {}
    for prov in ("cuda", "triton"):
        k = at.get(("remap_locs", REMAP_GOAL_CASE, prov, "eager"))
        c = at.get(("remap_locs", REMAP_GOAL_CASE, "copy", "eager"))
        if k and c and k["p50"] and c["p50"]:
            remap[prov] = round(k["p50"] / c["p50"], 2)
    speedup = {}
    for op, case in _cases(rows):
        for mode in ("eager", "graph"):
            t, c = at.get((op, case, "torch", mode)), at.get((op, case, "cuda", mode))
            if t and c and t["p50"] and c["p50"]:
                speedup[f"{op} {case} {mode}"] = round(t["p50"] / c["p50"], 1)
    return {
        "bw_fraction_of_copy_ge_64MiB": bw,
        "remap_16k_x_2048_vs_int32_copy": remap,
        "cuda_speedup_vs_torch": speedup,
    }


def _modes(rows: list[dict]) -> list[str]:
    """The timing modes a device's record shows: eager and graph on a GPU (host: JSON only)."""
    present = {r["mode"] for r in rows}
    return [m for m in ("graph", "eager") if m in present] or ["host"]


def sections(rows: list[dict]) -> dict[str, str]:
    return {
        f"{NAME} {dev} {mode}": table(mine, mode)
        for dev, mine in by_device(rows).items()
        for mode in _modes(mine)
    }


def figure(rows: list[dict]) -> benchkit.Figure:
    """Effective bandwidth vs bytes moved: a panel per (device, op, timing mode, row format), a
    line per provider. ``copy`` is always drawn from eager timing: captured in a graph it
    becomes a copy-engine memcpy node, slower than the copy kernel eager mode runs."""
    devices = by_device(rows)
    panels, formats = [], sorted({str(r["meta"].get("row", "")) for r in rows if r["meta"]})
    for dev, mine in devices.items():
        ceiling = copy_tbps(mine)
        hlines = [
            benchkit.HLine(ceiling, f"D2D copy {ceiling:.2f}", color="k"),
            benchkit.HLine(0.85 * ceiling, "85% goal", linestyle=":"),
        ]
        for op in PLOTTED_OPS:
            for mode in _modes(mine):
                for fmt in formats:
                    shown = [
                        r for r in mine
                        if r["op"] == op and r["meta"].get("row") == fmt and r["tbps"]
                        and r["mode"] == ("eager" if r["provider"] == "copy" else mode)
                    ]  # fmt: skip
                    lines = benchkit.lines_from_rows(
                        shown, x=lambda r: r["bytes_moved"] / 2**20, y="tbps",
                        label=lambda r: r["provider"],
                        style=lambda p: {"color": COLORS.get(p, "C0")},
                    )  # fmt: skip
                    where = f" ({dev})" if len(devices) > 1 else ""
                    panels.append(benchkit.Panel(
                        f"{op} {fmt} rows, {mode}{where}",
                        "bytes moved (read + write), MiB", "TB/s", lines, hlines, xscale="log",
                    ))  # fmt: skip
    return benchkit.Figure(panels, ncols=max(1, len(formats)), panel_size=(5, 3.6))


REPORT = benchkit.Report(
    name=NAME, figure=figure, sections=sections, key=("op", "case", "provider", "mode")
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/benchmarks", help="folder of the JSON and PNG")
    parser.add_argument("--md", type=Path, help="record whose table sections are rewritten")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=SIZES, help="case sizes (default: full; tiny on CPU)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes (--size quick)")
    parser.add_argument("--render", action="store_true", help="redraw from the JSON only")
    args = parser.parse_args(argv)
    if args.render:
        rows = REPORT.publish([], args.out, md=args.md)
        print(f"re-rendered {len(rows)} rows of {REPORT.json_path(args.out)}")
        return 0
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print(
            "error: --device cuda needs a CUDA GPU (--device cpu runs the smoke)", file=sys.stderr
        )
        return 2
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        print("error: --device cpu needs TRITON_INTERPRET=1 set for the run", file=sys.stderr)
        return 2
    size = args.size or ("quick" if args.quick else "full" if cuda else "tiny")
    ops = load_ops(args.device)  # imports cpkv_kernels, whose version the env records
    env = benchkit.capture_env(device=args.device, package="cpkv-kernels")
    rows = measure(size, args.device, ops, env)
    REPORT.publish(rows, args.out, md=args.md)
    ceiling = copy_tbps(rows)
    print(f"{env['gpu_name'] or env['cpu']} torch {env['torch']} triton {env['triton']} | "
          f"copy {ceiling:.3g} TB/s")  # fmt: skip
    for mode in timers(args.device):
        print(f"\n[{mode}] p50, us\n" + table(rows, mode, markdown=False))
    print("\ngoals:", goals(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
