"""Cold-cache DeepGEMM warmup, SGLang's grid against the CP-aware grid, side by side.

Each variant runs in its own process with an empty ``DG_JIT_CACHE_DIR`` (DeepGEMM keeps
compiled kernels in memory too), executes its M grid through the facade (so every kernel
config the grid reaches is JIT-compiled with nvcc) and reports wall time, warmup calls
made, and kernels compiled (``kernel.cubin`` files in the cache). A variant that runs past
``--budget-s`` stops there and is marked truncated, with what it had done by then.

Usage (on a GPU host with sgl-deep-gemm installed)::

    B=packages/deepgemm-compat/benchmarks/bench_warmup.py
    python3 $B --out $OUT --variants cp_aware --budget-s 200   # then --variants sglang
    python3 $B --report DIR1,DIR2 --out docs/benchmarks          # merge, write md/json/png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

VARIANTS = {"sglang": "before", "cp_aware": "after"}
# What the parent passes on to each variant's process.
CHILD_ARGS = ("chunked", "cp", "split", "shapes", "ep", "budget_s")


def _count_kernels(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("kernel.cubin"))


def child(args: argparse.Namespace) -> None:
    """One variant, in a fresh process whose DG_JIT_CACHE_DIR was set by the parent."""
    import deepgemm_compat as dgc
    import torch
    from deepgemm_compat.warmup import CPSetup, glm51_shapes, plan_warmup, run_warmup

    dgc.load()
    dgc.apply_pdl(0)
    by_name = {s.name: s for s in glm51_shapes(ep=args.ep)}
    shapes = [by_name[n] for n in args.shapes.split(",")]
    plan = plan_warmup(shapes, args.chunked, CPSetup(args.cp, args.split))
    cache = Path(os.environ["DG_JIT_CACHE_DIR"])
    kernels_at_sample: list[int] = []

    def progress(line: str) -> None:  # called right after each timeline sample
        kernels_at_sample.append(_count_kernels(cache))
        print(f"[{args.variant}] {line}, {kernels_at_sample[-1]} kernels", flush=True)

    t0 = time.perf_counter()
    run = run_warmup(
        plan,
        grid=VARIANTS[args.variant],
        budget_s=args.budget_s,
        progress=progress,
        progress_every_s=5.0,
    )
    wall = time.perf_counter() - t0
    doc = {
        "op": "deepgemm_warmup",
        "provider": args.variant,
        "case": f"{args.shapes} chunked={args.chunked} cp={args.cp}",
        "p50": wall,
        "p20": wall,
        "p80": wall,
        "unit": "s",
        "wall_s": wall,
        "calls_planned": sum(s.planned for s in run.shapes),
        "calls_executed": run.executed,
        "kernels_compiled": _count_kernels(cache),
        "truncated": run.truncated,
        "per_shape": [s.__dict__ for s in run.shapes],
        "timeline": [
            [round(t, 2), calls, kernels]
            for (t, calls), kernels in zip(run.timeline, kernels_at_sample, strict=True)
        ],
        "gpu_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "sgl_deep_gemm": str(dgc.surface().version),
        "pkg_version": _pkg_version(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": " ".join(sys.argv),
        "dense_m_max": plan.dense_m_max,
        "m_max": plan.m_max,
    }
    Path(args.json).write_text(json.dumps(doc, indent=1))


def _pkg_version() -> str:
    import importlib.metadata as md

    try:
        return md.version("deepgemm-compat")
    except md.PackageNotFoundError:
        return "src"


def parent(args: argparse.Namespace) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for variant in args.variants.split(","):
        cache = Path(tempfile.mkdtemp(prefix=f"dg-cache-{variant}-"))
        result = out / f"warmup_{variant}.json"
        cmd = [sys.executable, __file__, "--child", "--variant", variant, "--json", str(result)]
        for name in CHILD_ARGS:
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        env = {
            **os.environ,
            "DG_JIT_CACHE_DIR": str(cache),
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        print(f"== {variant}: cache {cache}", flush=True)
        proc = subprocess.run(cmd, env=env, timeout=args.budget_s + 120)
        if proc.returncode != 0 or not result.exists():
            raise SystemExit(f"variant {variant} failed with exit code {proc.returncode}")
        rows.append(json.loads(result.read_text()))
    return rows


def _grid_max(r: dict) -> int:
    return r["dense_m_max"] if r["provider"] == "cp_aware" else r["m_max"]


def _by_case(rows: list[dict]) -> dict[str, list[dict]]:
    cases: dict[str, list[dict]] = {}
    for r in rows:
        cases.setdefault(r["case"], []).append(r)
    return cases


def report(rows: list[dict], out: Path) -> None:
    """Print the side-by-side table; write deepgemm-compat.json and .png (a row per case)."""
    if not rows:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    print(
        f"{'case':<58} | {'variant':<8} | {'m_max':>6} | {'calls':>15} | {'kernels':>7} | "
        f"{'wall s':>7} | truncated"
    )
    for r in rows:
        calls = f"{r['calls_executed']}/{r['calls_planned']}"
        print(
            f"{r['case']:<58} | {r['provider']:<8} | {_grid_max(r):>6} | "
            f"{calls:>15} | {r['kernels_compiled']:>7} | {r['wall_s']:>7.1f} | {r['truncated']}"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "deepgemm-compat.json").write_text(json.dumps(rows, indent=1))
    colors = {"sglang": "tab:gray", "cp_aware": "tab:blue"}
    cases = _by_case(rows)
    fig, axes = plt.subplots(len(cases), 2, figsize=(10, 3.6 * len(cases)), squeeze=False)
    for (case, case_rows), (ax_calls, ax_kernels) in zip(cases.items(), axes, strict=True):
        for r in case_rows:
            tl = r.get("timeline") or [[r["wall_s"], r["calls_executed"], r["kernels_compiled"]]]
            t = [0.0] + [p[0] for p in tl]
            c = colors.get(r["provider"])
            label = f"{r['provider']}: {r['calls_planned']} calls, {r['wall_s']:.0f} s"
            ax_calls.plot(t, [0] + [p[1] for p in tl], color=c, label=label)
            ax_calls.axhline(r["calls_planned"], color=c, ls=":", lw=0.8)
            ax_kernels.plot(t, [0] + [p[2] for p in tl], color=c, label=r["provider"])
        ax_calls.set_yscale("symlog", linthresh=100)
        ax_calls.set_ylim(bottom=0)
        ax_calls.set_ylabel("warmup calls done (dotted: planned)")
        ax_kernels.set_ylabel("kernels JIT-compiled")
        ax_calls.set_title(case, fontsize=8)
        ax_kernels.set_title(case_rows[0]["gpu_name"] + ", cold JIT cache", fontsize=8)
        for ax in (ax_calls, ax_kernels):
            ax.set_xlabel("seconds since warmup start")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "deepgemm-compat.png", dpi=120)


def calls_at(r: dict, seconds: float) -> tuple[int, int]:
    """(calls, kernels) a run had reached by ``seconds``, from its timeline samples."""
    calls = kernels = 0
    for t, c, k in r.get("timeline", []):
        if t > seconds + 0.01:  # samples are rounded to 10 ms
            break
        calls, kernels = c, k
    return calls, kernels


def write_markdown(rows: list[dict], gpu: list[dict], out: Path) -> None:
    """docs/benchmarks/deepgemm-compat.md from the run's JSON (warmup + GPU test figures)."""
    from deepgemm_compat.warmup import CPSetup, glm51_shapes, plan_warmup

    lines = [
        "# deepgemm-compat on the H200",
        "",
        "## CP-aware warmup plan (exact, from the planner)",
        "",
        "GLM-5.1 on one rank (attention TP 1, EP 8, MoE contiguous), SGLang's full warmup grid:",
        "",
        "| chunked | CP | split | dense m_max | warmup calls before | after |",
        "|---|---|---|---|---|---|",
    ]
    cases = [(c, 8, "interleave") for c in (65536, 32768, 16384, 8192)]
    cases += [(65536, 4, "interleave"), (10000, 8, "interleave"), (65536, 8, "zigzag")]
    for chunked, cp, split in cases:
        plan = plan_warmup(glm51_shapes(), chunked, CPSetup(cp, split))
        lines.append(
            f"| {chunked} | {cp} | {split} | {plan.m_max} -> {plan.dense_m_max} | "
            f"{plan.before_total} | {plan.after_total} |"
        )
    lines += ["", "## Cold-cache warmup on the GPU", ""]
    if not rows:
        lines += [
            "Not run yet: see the package README for the command; "
            "`bench_warmup.py --report` rewrites this file from the run's JSON."
        ]
    for case, case_rows in _by_case(rows).items():
        r0 = case_rows[0]
        lines += [
            f"### {case}",
            "",
            f"{r0['gpu_name']}, torch {r0['torch']}, sgl-deep-gemm {r0['sgl_deep_gemm']}, "
            f"{r0['timestamp']}. Command: `{r0['command']}`.",
            "",
            "| grid | M grid up to | warmup calls (done/planned) | kernels compiled | wall s "
            "| truncated |",
            "|---|---|---|---|---|---|",
        ]
        for r in case_rows:
            lines.append(
                f"| {r['provider']} | {_grid_max(r)} | {r['calls_executed']}/{r['calls_planned']} "
                f"| {r['kernels_compiled']} | {r['wall_s']:.1f} | {r['truncated']} |"
            )
        lines += ["", "| grid | shape | kernel | Ms done/planned | s |", "|---|---|---|---|---|"]
        for r in case_rows:
            for s in r["per_shape"]:
                lines.append(
                    f"| {r['provider']} | {s['name']} | {s['kernel']} | "
                    f"{s['executed']}/{s['planned']} | {s['seconds']:.1f} |"
                )
        done = [r for r in case_rows if not r["truncated"]]
        if done and len(case_rows) > 1:
            first = min(done, key=lambda r: r["wall_s"])
            lines += ["", f"At {first['wall_s']:.1f} s, when {first['provider']} finished:", ""]
            for r in case_rows:
                calls, kernels = calls_at(r, first["wall_s"])
                lines.append(
                    f"- {r['provider']}: {calls}/{r['calls_planned']} calls, {kernels} kernels"
                )
        lines.append("")
    for doc in gpu:
        lines += [
            "",
            f"## Facade against torch references: sgl-deep-gemm {doc['sgl_deep_gemm']}",
            f"{doc['gpu']}, torch {doc['torch']}, {doc['timestamp']}. calc_diff is DeepGEMM's "
            "1 - 2<x,y>/(|x|^2+|y|^2); max_rel_err is max|x-y| / max|y|.",
            "",
            "| op | case | calc_diff | max_rel_err |",
            "|---|---|---|---|",
        ]
        for row in doc["rows"]:
            if "calc_diff" in row:
                lines.append(
                    f"| {row['op']} | {row['case']} | {row['calc_diff']:.2e} "
                    f"| {row['max_rel_err']:.2e} |"
                )
            else:
                extra = {k: v for k, v in row.items() if k not in ("op", "case")}
                lines.append(f"| {row['op']} | {row['case']} | {extra} | |")
    (out / "deepgemm-compat.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="docs/benchmarks", help="where JSON/PNG go")
    ap.add_argument("--chunked", type=int, default=8192)
    ap.add_argument("--cp", type=int, default=8)
    ap.add_argument("--split", default="interleave")
    ap.add_argument("--ep", type=int, default=8)
    ap.add_argument(
        "--shapes",
        default="indexer.wq_b,shared_expert.down_proj,moe.gate_up_proj",
        help="comma-separated GLM-5.1 shape names (see deepgemm-compat plan)",
    )
    ap.add_argument("--variants", default="cp_aware,sglang")
    ap.add_argument("--budget-s", type=float, default=200.0, help="per variant; 200")
    ap.add_argument(
        "--report",
        help="comma-separated folders of warmup_*.json / gpu_results*.json "
        "to merge into --out instead of running",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    gpu: list[dict] = []
    if args.report:
        folders = [Path(p) for p in args.report.split(",")]
        rows = [json.loads(p.read_text()) for f in folders for p in sorted(f.glob("warmup_*.json"))]
        gpu = [
            json.loads(p.read_text()) for f in folders for p in sorted(f.glob("gpu_results*.json"))
        ]
    else:
        rows = parent(args)
    case_order = list(dict.fromkeys(r["case"] for r in rows))
    rows.sort(key=lambda r: (case_order.index(r["case"]), list(VARIANTS).index(r["provider"])))
    print(f"host: {platform.node()} python {platform.python_version()}")
    report(rows, Path(args.out))
    write_markdown(rows, gpu, Path(args.out))


if __name__ == "__main__":
    main()
