"""Cold-cache DeepGEMM warmup, SGLang's grid against the CP-aware grid, side by side.

Each variant runs in its own process with an empty ``DG_JIT_CACHE_DIR`` (DeepGEMM keeps
compiled kernels in memory too), executes its M grid through the facade (so every kernel
config the grid reaches is JIT-compiled with nvcc) and reports wall time, warmup calls
made, and kernels compiled (``kernel.cubin`` files in the cache). A variant that runs past
``--budget-s`` stops there and is marked truncated, with what it had done by then.

Usage (on a GPU host with sgl-deep-gemm installed)::

    B=packages/deepgemm-compat/benchmarks/bench_warmup.py
    python3 $B --out $OUT --variants cp_aware --budget-s 200   # then --variants sglang
    python3 $B --report DIR1,DIR2 --out docs/benchmarks --md docs/benchmarks/deepgemm-compat.md
    python3 $B --render --md docs/benchmarks/deepgemm-compat.md  # redraw from the JSON alone

``--report`` merges the runs' ``warmup_*.json`` and the facade GPU tests' ``gpu_results*.json``
(``DGC_GPU_RESULTS``) into ``<out>/deepgemm-compat.json``: rows of other devices, cases and
providers already there are kept. It then draws ``deepgemm-compat.png`` and, with ``--md``,
rewrites the record's generated tables (warmup plan, facade accuracy, one per warmup case).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchkit

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

NAME = "deepgemm-compat"
VARIANTS = {"sglang": "before", "cp_aware": "after"}
# What the parent passes on to each variant's process.
CHILD_ARGS = ("chunked", "cp", "split", "shapes", "ep", "budget_s")
COLORS = {"sglang": "tab:gray", "cp_aware": "tab:blue"}
PLAN_CASES = (
    *((c, 8, "interleave") for c in (65536, 32768, 16384, 8192)),
    (65536, 4, "interleave"),
    (10000, 8, "interleave"),
    (65536, 8, "zigzag"),
)


def _count_kernels(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("kernel.cubin"))


def child(args: argparse.Namespace) -> None:
    """One variant, in a fresh process whose DG_JIT_CACHE_DIR was set by the parent."""
    import deepgemm_compat as dgc
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

    run, wall = benchkit.timed(
        lambda: run_warmup(
            plan,
            grid=VARIANTS[args.variant],
            budget_s=args.budget_s,
            progress=progress,
            progress_every_s=5.0,
        )
    )
    env = benchkit.capture_env(device="cuda", package="deepgemm-compat")
    doc = {
        "op": "deepgemm_warmup",
        "provider": args.variant,
        "case": f"{args.shapes} chunked={args.chunked} cp={args.cp}",
        **benchkit.quantiles([wall]).to("s"),  # one run: p20 = p50 = p80
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
        **env,
        "sgl_deep_gemm": str(dgc.surface().version),
        "dense_m_max": plan.dense_m_max,
        "m_max": plan.m_max,
    }
    Path(args.json).write_text(json.dumps(doc, indent=1))


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


def facade_rows(doc: dict) -> list[dict]:
    """The facade GPU tests' ``gpu_results.json`` (``DGC_GPU_RESULTS``) as record rows, one per
    checked op and case, for the wheel the tests ran on."""
    wheel = doc["sgl_deep_gemm"]
    env = {"gpu_name": doc["gpu"], "torch": doc["torch"], "sgl_deep_gemm": wheel}
    return [
        {"op": row["op"], "provider": f"facade/sgl-deep-gemm {wheel}", "case": str(row["case"]),
         "kind": "gpu_test_accuracy",
         **{k: v for k, v in row.items() if k not in ("op", "case")},
         **env, "timestamp": doc["timestamp"]}
        for row in doc["rows"]
    ]  # fmt: skip


def _grid_max(r: dict) -> int:
    return r["dense_m_max"] if r["provider"] == "cp_aware" else r["m_max"]


def _warmup_by_case(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(device, case) -> its warmup rows, SGLang's grid first."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["op"] == "deepgemm_warmup":
            out.setdefault((benchkit.device_label(r), r["case"]), []).append(r)
    order = list(VARIANTS)
    return {k: sorted(v, key=lambda r: order.index(r["provider"])) for k, v in out.items()}


def print_table(rows: list[dict]) -> None:
    """The warmup runs side by side on the console."""
    head = ["case", "variant", "m_max", "calls", "kernels", "wall s", "truncated"]
    lines = [
        [r["case"], r["provider"], _grid_max(r), f"{r['calls_executed']}/{r['calls_planned']}",
         r["kernels_compiled"], f"{r['wall_s']:.1f}", r["truncated"]]
        for case_rows in _warmup_by_case(rows).values() for r in case_rows
    ]  # fmt: skip
    print(benchkit.text_table(head, lines))


def plan_table() -> str:
    """SGLang's full warmup grid against the CP-aware one, exact from the planner: only the
    cp-local (attention-side) shapes shrink."""
    from deepgemm_compat.warmup import CPSetup, Rows, glm51_shapes, plan_warmup

    lines = []
    for chunked, cp, split in PLAN_CASES:
        plan = plan_warmup(glm51_shapes(), chunked, CPSetup(cp, split))
        local = sum(1 for e in plan.entries if e.shape.rows is Rows.CP_LOCAL)
        lines.append([chunked, cp, split, f"{plan.m_max} -> {plan.dense_m_max}",
                      f"{local}/{len(plan.entries)}", plan.before_total,
                      plan.after_total])  # fmt: skip
    head = ["chunked", "CP", "split", "cp-local m_max", "cp-local shapes", "warmup calls before",
            "after"]  # fmt: skip
    return benchkit.markdown_table(head, lines)


def warmup_tables(case_rows: list[dict]) -> str:
    """One case's runs: a line per grid, then (for more than one shape) a line per grid and
    shape."""
    runs = benchkit.markdown_table(
        ["grid", "M grid up to", "warmup calls (done/planned)", "kernels compiled", "wall s",
         "truncated"],
        [[r["provider"], _grid_max(r), f"{r['calls_executed']}/{r['calls_planned']}",
          r["kernels_compiled"], f"{r['wall_s']:.1f}", r["truncated"]] for r in case_rows],
    )  # fmt: skip
    shapes = benchkit.markdown_table(
        ["grid", "shape", "kernel", "Ms done/planned", "s"],
        [[r["provider"], s["name"], s["kernel"], f"{s['executed']}/{s['planned']}",
          f"{s['seconds']:.1f}"] for r in case_rows for s in r["per_shape"]],
    )  # fmt: skip
    return f"{runs}\n\n{shapes}" if any(len(r["per_shape"]) > 1 for r in case_rows) else runs


def facade_table(rows: list[dict]) -> str:
    """calc_diff and max_rel_err of every facade check, the wheels side by side."""
    checked = [r for r in rows if r.get("kind") == "gpu_test_accuracy" and "calc_diff" in r]
    wheels = list(dict.fromkeys(r["sgl_deep_gemm"] for r in checked))
    at = {(r["op"], r["case"], r["sgl_deep_gemm"]): r for r in checked}
    head = ["op", "case"]
    for w in wheels:
        head += [f"calc_diff {w}", f"max_rel_err {w}"]
    lines = []
    for op, case in dict.fromkeys((r["op"], r["case"]) for r in checked):
        cells = [op, case]
        for w in wheels:
            r = at.get((op, case, w))
            cells += [f"{r['calc_diff']:.2e}", f"{r['max_rel_err']:.2e}"] if r else ["-", "-"]
        lines.append(cells)
    return benchkit.markdown_table(head, lines, align="ll" + "rr" * len(wheels))


def sections(rows: list[dict]) -> dict[str, str]:
    out = {f"{NAME} plan": plan_table()}
    for dev in dict.fromkeys(benchkit.device_label(r) for r in rows if "calc_diff" in r):
        mine = [r for r in rows if benchkit.device_label(r) == dev]
        out[f"{NAME} {dev} facade"] = facade_table(mine)
    for (dev, case), case_rows in _warmup_by_case(rows).items():
        out[f"{NAME} {dev} warmup {case}"] = warmup_tables(case_rows)
    return out


def figure(rows: list[dict]) -> benchkit.Figure:
    """Per warmup case: calls done and kernels compiled against time, a line per grid."""
    panels = []
    for (dev, case), case_rows in _warmup_by_case(rows).items():
        calls, kernels, planned = [], [], []
        for r in case_rows:
            tl = r.get("timeline") or [[r["wall_s"], r["calls_executed"], r["kernels_compiled"]]]
            t, c = [0.0] + [p[0] for p in tl], COLORS.get(r["provider"])
            label = f"{r['provider']}: {r['calls_planned']} calls, {r['wall_s']:.0f} s"
            calls.append(benchkit.Line(label, t, [0] + [p[1] for p in tl], color=c, marker=None))
            kernels.append(
                benchkit.Line(r["provider"], t, [0] + [p[2] for p in tl], color=c, marker=None)
            )
            planned.append(benchkit.HLine(r["calls_planned"], "", color=c, linestyle=":"))
        xlabel = "seconds since warmup start"
        panels += [
            benchkit.Panel(case, xlabel, "warmup calls done (dotted: planned)", calls, planned,
                           yscale="symlog", linthresh=100, ymin=0),
            benchkit.Panel(f"{dev}, cold JIT cache", xlabel, "kernels JIT-compiled", kernels),
        ]  # fmt: skip
    return benchkit.Figure(panels, ncols=2, panel_size=(5, 3.6))


REPORT = benchkit.Report(name=NAME, figure=figure, sections=sections)


def read_runs(folders: list[Path]) -> list[dict]:
    """The warmup rows and facade rows found in the run folders."""
    rows = [json.loads(p.read_text()) for f in folders for p in sorted(f.glob("warmup_*.json"))]
    for f in folders:
        for p in sorted(f.glob("gpu_results*.json")):
            rows += facade_rows(json.loads(p.read_text()))
    if not rows:
        raise SystemExit(f"no warmup_*.json or gpu_results*.json in {[str(f) for f in folders]}")
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="docs/benchmarks", help="where JSON/PNG go")
    ap.add_argument("--md", help="record whose generated tables are rewritten")
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
    ap.add_argument("--render", action="store_true", help="redraw --out's JSON, no runs")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    if args.render:
        rows = []
    elif args.report:
        rows = read_runs([Path(p) for p in args.report.split(",")])
    else:
        rows = parent(args)
    all_rows = REPORT.publish(rows, args.out, md=args.md)
    print_table(all_rows)


if __name__ == "__main__":
    main()
