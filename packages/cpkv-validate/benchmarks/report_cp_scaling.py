"""CP scaling report: parallel efficiency and per-phase speed-up from bench_prefill.py's rows.

Reads the prefill rows one machine recorded in ``validate.json`` (``--where``, e.g.
"NVIDIA H200 x2"), and for every (tokens, cp) computes the speed-up over cp 1 and the parallel
efficiency (speed-up / cp), per layer and per phase. Prints the table and writes
``cp-scaling.json`` (these rows first, then the rows already in that file that this report did
not remake: cpkv-validate runs, earlier prefill runs) and ``cp-scaling.png`` (time per layer
against the ideal, efficiency against the goals, and the phases of each layer as stacked bars).

    python3 packages/cpkv-validate/benchmarks/report_cp_scaling.py \\
        --where "NVIDIA H200 x2" --rows docs/benchmarks/validate.json --out docs/benchmarks
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _prefill_rows import load_rows, p50_index, phase_ms, speedups, unreplaced

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
    print(
        f"{'tokens':>7} {'cp':>3} {'ms/layer':>9} {'speed-up':>8} {'eff.':>6}  "
        + " ".join(f"{n[:10]:>10}" for n in names)
    )
    for r in rows:
        goal = "" if r["goal_met"] is None else (" goal met" if r["goal_met"] else " goal MISSED")
        print(
            f"{r['tokens']:>7} {r['cp']:>3} {r['p50']:>9.1f} {r['speedup_vs_cp1']:>7.2f}x "
            f"{100 * r['parallel_efficiency']:>5.1f}%  "
            + " ".join(f"{r['phases_ms'].get(n, 0):>10.1f}" for n in names)
            + goal
        )


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_e, ax_p) = plt.subplots(1, 3, figsize=(17, 4.6))
    lengths = sorted({r["tokens"] for r in rows})
    for i, tokens in enumerate(lengths):
        rs = sorted((r for r in rows if r["tokens"] == tokens), key=lambda r: r["cp"])
        cps = [r["cp"] for r in rs]
        c = f"C{i}"
        ax_t.plot(cps, [r["p50"] for r in rs], "-o", color=c, label=f"{tokens // 1024}K measured")
        ax_t.plot(
            cps, [rs[0]["p50"] / cp for cp in cps], ":", color=c, label=f"{tokens // 1024}K ideal"
        )
        ax_e.plot(
            cps,
            [100 * r["parallel_efficiency"] for r in rs],
            "-o",
            color=c,
            label=f"{tokens // 1024}K",
        )
    for cp, goal in GOALS.items():
        ax_e.plot([cp], [100 * goal], "r_", markersize=22, mew=2)
        ax_e.annotate(
            f"goal {goal:.0%} at {GOAL_TOKENS // 1024}K",
            (cp, 100 * goal),
            textcoords="offset points",
            xytext=(6, -12),
            color="r",
            fontsize=8,
        )
    missing = [cp for cp in (2, 4, 8) if cp not in {r["cp"] for r in rows}]
    if missing:
        ax_e.text(
            0.98,
            0.04,
            f"cp {', '.join(map(str, missing))}: not measured",
            transform=ax_e.transAxes,
            ha="right",
            fontsize=8,
            color="gray",
        )
    for ax in (ax_t, ax_e):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("cp (GPUs)")
        ax.legend(fontsize=7)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("ms per layer (p50)")
    ax_t.set_title("prefill time per layer")
    ax_e.set_ylabel("parallel efficiency % (speed-up / cp)")
    ax_e.set_ylim(0, 110)
    ax_e.set_title("parallel efficiency")
    names = list(rows[0]["phases_ms"])
    labels = [f"{r['tokens'] // 1024}K\ncp{r['cp']}" for r in rows]
    bottom = [0.0] * len(rows)
    for j, name in enumerate(names):
        vals = [max(r["phases_ms"].get(name, 0.0), 0.0) for r in rows]
        color = "lightgray" if name == "other" else f"C{j}"
        ax_p.bar(labels, vals, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax_p.set_ylabel("ms per layer (p50)")
    ax_p.set_title("where the layer time goes")
    ax_p.legend(fontsize=7)
    r0 = rows[0]
    fig.suptitle(
        f"cpkv-validate reference engine, {r0['model']}, 1 request, {r0['where']}, "
        f"torch {r0['torch']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
    rows = scaling_rows(json.loads(args.rows.read_text()), args.where, args.provider)
    print_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    old = args.out / "cp-scaling.json"
    # keep every recorded row this report does not remake (validate runs, earlier runs)
    kept = unreplaced(load_rows(old), rows)
    old.write_text(json.dumps(rows + kept, indent=1, ensure_ascii=False) + "\n")
    plot(rows, args.out / "cp-scaling.png")
    print(f"wrote {old} ({len(rows)} scaling rows, {len(kept)} recorded rows kept), cp-scaling.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
