"""CP scaling report: parallel efficiency and per-phase speed-up from bench_prefill.py's rows.

Reads the prefill rows one machine recorded in ``validate.json`` (``--where``, e.g.
"NVIDIA H200 x2"), and for every (tokens, cp) computes the speed-up over cp 1 and the parallel
efficiency (speed-up / cp), per layer and per phase. Prints the table and writes, through
benchkit, ``cp-scaling.json`` (these rows first, then the rows already in that file that this
report did not remake: cpkv-validate runs, earlier prefill runs) and ``cp-scaling.png`` (time
per layer against the ideal, efficiency against the goals, and each phase's time per layer).

    uv run python packages/cpkv-validate/benchmarks/report_cp_scaling.py \\
        --where "NVIDIA H200 x2" --rows docs/benchmarks/validate.json --out docs/benchmarks
"""

from __future__ import annotations

import argparse
from pathlib import Path

import benchkit
from _prefill_rows import load_rows, merged, p50_index, phase_ms, speedups

# Scaling goals: parallel efficiency (speed-up / cp) at 128K tokens, per cp.
GOALS = {2: 0.90, 8: 0.75}
GOAL_TOKENS = 131072


def _label(op: str) -> str:
    return "cpkv ops" if op == "cpkv_ops_per_layer" else op.removeprefix("phase:").replace("_", " ")


def scaling_rows(rows: list[dict], where: str, provider: str = "auto") -> list[dict]:
    """One row per (tokens, cp): the layer p50, its phases, speed-ups and efficiency."""
    mine = [r for r in rows if r.get("where") == where and r.get("provider") == provider]
    p50 = p50_index(mine)
    layers = {(r["tokens"], r["cp"]): r for r in mine if r["op"] == "prefill_layer"}
    out = []
    for (tokens, cp), layer in sorted(layers.items()):
        base_phases = phase_ms(p50, tokens, 1, provider)
        if base_phases is None:
            raise SystemExit(f"{where}: tokens={tokens} has cp {cp} but no cp 1 row to compare")
        phases = phase_ms(p50, tokens, cp, provider)
        speedup = p50[("prefill_layer", tokens, 1, provider)] / layer["p50"]
        goal = GOALS.get(cp) if tokens == GOAL_TOKENS else None
        out.append(
            {
                "op": "prefill_layer_scaling",
                "provider": provider,
                "case": f"tokens={tokens} cp={cp}",
                "tokens": tokens,
                "cp": cp,
                "where": where,
                **{k: layer[k] for k in ("gpu_name", "torch", "cuda", "model", "timestamp")},
                "command": layer["command"],
                "p50": layer["p50"],
                "p20": layer["p20"],
                "p80": layer["p80"],
                "unit": "ms",
                "phases_ms": {_label(k): v for k, v in phases.items()},
                "phase_speedup_vs_cp1": {
                    _label(k): v for k, v in speedups(phases, base_phases).items()
                },
                "speedup_vs_cp1": speedup,
                "parallel_efficiency": speedup / cp,
                "goal_efficiency": goal,
                "goal_met": None if goal is None else speedup / cp >= goal,
            }
        )
    if not out:
        raise SystemExit(f"no prefill_layer rows for where={where!r} provider={provider!r}")
    return out


def print_table(rows: list[dict]) -> None:
    names = list(rows[0]["phases_ms"])
    header = ["tokens", "cp", "ms/layer", "speed-up", "eff.", *(n[:10] for n in names), "goal"]
    body = [
        [
            r["tokens"],
            r["cp"],
            f"{r['p50']:.1f}",
            f"{r['speedup_vs_cp1']:.2f}x",
            f"{100 * r['parallel_efficiency']:.1f}%",
            *(f"{r['phases_ms'].get(n, 0):.1f}" for n in names),
            "" if r["goal_met"] is None else ("met" if r["goal_met"] else "MISSED"),
        ]
        for r in rows
    ]
    print(benchkit.text_table(header, body))


def figure(rows: list[dict]) -> benchkit.Figure:
    """Time per layer against the ideal, efficiency against the goals, each phase's time."""
    measured, ideal, efficiency = [], [], []
    for i, tokens in enumerate(sorted({r["tokens"] for r in rows})):
        rs = sorted((r for r in rows if r["tokens"] == tokens), key=lambda r: r["cp"])
        cps, c, k = [r["cp"] for r in rs], f"C{i}", f"{tokens // 1024}K"
        measured.append(benchkit.Line(f"{k} measured", cps, [r["p50"] for r in rs], color=c))
        ideal += [
            benchkit.Line(
                f"{k} ideal", cps, [rs[0]["p50"] / cp for cp in cps], color=c, linestyle=":",
                marker=None,
            )
        ]  # fmt: skip
        eff = [100 * r["parallel_efficiency"] for r in rs]
        efficiency.append(benchkit.Line(k, cps, eff, color=c))
    at = f"{GOAL_TOKENS // 1024}K"
    goals = [
        benchkit.HLine(100 * g, f"goal {g:.0%} at cp {cp}, {at}", color=f"C{n + 5}")
        for n, (cp, g) in enumerate(GOALS.items())
    ]
    names = list(rows[0]["phases_ms"])
    cases = [f"{r['tokens'] // 1024}K cp{r['cp']}" for r in rows]
    xs = list(range(len(rows)))
    phases = [
        benchkit.Line(n, xs, [max(r["phases_ms"].get(n, 0.0), 0.0) for r in rows]) for n in names
    ]
    missing = [cp for cp in (2, 4, 8) if cp not in {r["cp"] for r in rows}]
    eff_title = "parallel efficiency" + (
        f" (cp {', '.join(map(str, missing))}: not measured)" if missing else ""
    )
    r0 = rows[0]
    return benchkit.Figure(
        [
            benchkit.Panel(
                "prefill time per layer", "cp (GPUs)", "ms per layer (p50)", measured + ideal,
                yscale="log",
            ),
            benchkit.Panel(
                eff_title, "cp (GPUs)", "parallel efficiency % (speed-up / cp)", efficiency,
                hlines=goals, ymin=0,
            ),
            benchkit.Panel(
                "where the layer time goes", "case", "ms per layer (p50)", phases, xticks=cases
            ),
        ],
        title=f"cpkv-validate reference engine, {r0['model']}, 1 request, {r0['where']}, "
        f"torch {r0['torch']}",
        ncols=3,
    )  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--where", required=True, help='machine label in the rows, e.g. "NVIDIA H200 x2"'
    )
    p.add_argument("--rows", type=Path, default=Path("docs/benchmarks/validate.json"))
    p.add_argument("--provider", default="auto", help="cpkv_runtime backend rows to use")
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    args = p.parse_args()
    if not args.rows.exists():
        p.error(f"--rows {args.rows} does not exist; run bench_prefill.py first or give its JSON")
    rows = scaling_rows(load_rows(args.rows), args.where, args.provider)
    print_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    old = args.out / "cp-scaling.json"
    # keep every recorded row this report does not remake (validate runs, earlier runs)
    kept = merged(load_rows(old), rows)[: -len(rows)]  # merged() puts the new rows last
    benchkit.write_record(old, "cp-scaling", rows + kept)  # this report's rows first
    benchkit.write_png(args.out / "cp-scaling.png", figure(rows))
    print(f"wrote {old} ({len(rows)} scaling rows, {len(kept)} recorded rows kept), cp-scaling.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
