"""Benchmark: reference lightning indexer per layer, and over 78 layers unshared vs IndexCache.

What is measured: one prefill chunk of Q query rows (the last Q positions of a T-token sequence,
causal) scored against all T keys and reduced to the top-k, as a DSA layer's indexer runs it once
q/k/weights exist (GLM-5 sizes: 32 heads x 128, index_topk 2048; bf16 q/k, float32 weights). The
reference works in float32 as transformers does, processing rows in slices so its (rows, H, T)
float32 intermediate stays under --budget-gib. "78 layers" runs the real gate + carry
(``TopkCarry.step``) over 78 layers: freq 1 computes 78 times, freq 4 / offset 2 computes 21.
Where ``deepgemm_compat.mqa_logits`` imports and runs (fp8 kernel, CUDA), the same is timed with it.

    python3 packages/indexcache/benchmarks/bench_indexer.py --quick          # CPU smoke
    PYTHONPATH=packages/indexcache/src:packages/deepgemm-compat/src \\
        python3 packages/indexcache/benchmarks/bench_indexer.py --out "$OUT"   # H200

Writes ``<out>/indexcache.json`` (rows of other devices already there are kept; this device's
are replaced) and ``<out>/indexcache.png`` (this run); ``--md FILE`` also rewrites the section
between ``<!-- BEGIN <section> -->`` and ``<!-- END <section> -->`` in FILE.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import indexcache
import torch
from indexcache import IndexerSchedule, TopkCarry, causal_window, lightning_indexer

LAYERS, HEADS, HEAD_DIM, TOPK = 78, 32, 128, 2048
GOAL = 0.30  # shared-schedule indexer time / unshared, at most (21 of 78 layers compute: 0.269)
SCHEDULES = {
    "freq 1": IndexerSchedule.from_freq(LAYERS, 1, 2),
    "freq 4 offset 2": IndexerSchedule.from_freq(LAYERS, 4, 2),
}


def _timer(device: torch.device) -> Callable[[Callable[[], object], int], list[float]]:
    """Return ``time(fn, reps) -> [ms, ...]`` using CUDA events on GPU, perf_counter on CPU."""

    def run(fn: Callable[[], object], reps: int) -> list[float]:
        out = []
        for _ in range(reps):
            if device.type == "cuda":
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                out.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        return out

    return run


def setup_indexer(
    t: int, q_rows: int, device: torch.device, budget_gib: float
) -> tuple[dict[str, Callable], str | None]:
    """One layer's indexer call per provider on shared random inputs, and why fp8 is skipped."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(q_rows, HEADS, HEAD_DIM, generator=g).to(device, torch.bfloat16)
    k = torch.randn(t, HEAD_DIM, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(q_rows, HEADS, generator=g) * HEADS**-0.5).to(device)
    ks, ke = causal_window(q_rows, t, device=device)
    rows = max(1, int(budget_gib * 2**30) // (HEADS * t * 4))
    providers: dict[str, Callable] = {
        "torch-ref": lambda: lightning_indexer(q, k, w, TOPK, ks=ks, ke=ke, chunk_rows=rows)
    }
    fp8 = _fp8_provider(q, k, w, ks, ke)
    if isinstance(fp8, str):
        return providers, fp8
    providers["deepgemm-fp8"] = fp8
    return providers, None


def _fp8_provider(q, k, w, ks, ke) -> Callable | str:
    """``deepgemm_compat.mqa_logits`` + top-k, or a string saying why it cannot run here."""
    if q.device.type != "cuda":
        return "fp8 mqa_logits skipped: needs CUDA (DeepGEMM kernel)"
    try:
        import deepgemm_compat
    except Exception as exc:  # OSError without CUDA libs, ImportError without the package
        return (
            f"fp8 mqa_logits skipped: deepgemm_compat not importable ({type(exc).__name__}: {exc})"
        )
    fn = getattr(deepgemm_compat, "mqa_logits", None)
    if fn is None:
        return "fp8 mqa_logits skipped: deepgemm_compat has no mqa_logits"
    scale = k.float().abs().amax(dim=-1).clamp_min(1e-4) / 448.0
    k_fp8 = (k.float() / scale[:, None]).to(torch.float8_e4m3fn)
    q_fp8 = q.to(torch.float8_e4m3fn)
    w_scaled = w.float() * HEAD_DIM**-0.5  # DeepGEMM takes the softmax scale folded into weights

    def call():  # facade signature: mqa_logits(q, kv, kv_scale, weights, ks, ke)
        logits = fn(q_fp8, k_fp8, scale, w_scaled, ks, ke)
        return logits.topk(min(TOPK, k.shape[0]), dim=-1).indices

    try:  # smoke-check against the reference before timing anything
        n = min(256, q.shape[0])
        ref = indexcache.indexer_logits(q[-n:], k, w[-n:], ks=ks[-n:], ke=ke[-n:])
        got = fn(q_fp8[-n:], k_fp8, scale, w_scaled[-n:], ks[-n:], ke[-n:]).float()
        vis = torch.isfinite(ref)
        err = ((got[vis] - ref[vis]).abs().max() / ref[vis].abs().max()).item()
        if not err < 0.2:  # fp8 e4m3 keeps 3 mantissa bits
            return f"fp8 mqa_logits skipped: disagrees with the reference (max rel err {err:.3f})"
    except Exception as exc:
        return f"fp8 mqa_logits skipped: call failed ({type(exc).__name__}: {exc})"
    return call


def bench(args: argparse.Namespace) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    timer = _timer(device)
    meta = {
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} thread(s)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "pkg_version": indexcache.__version__,
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
    }
    rows: list[dict] = []
    notes: set[str] = set()
    for t in args.seq_lens:
        q_rows = min(args.query_rows, t)
        providers, note = setup_indexer(t, q_rows, device, args.budget_gib)
        notes.update([note] if note else [])
        case = f"T={t} Q={q_rows} H={HEADS} D={HEAD_DIM} topk={TOPK}"
        for name, fn in providers.items():
            fn()  # warm-up (allocator, kernels)
            per_layer = timer(fn, args.reps)
            rows.append(_row("indexer_layer", name, case, per_layer, meta, t, q_rows, None, 1))
            p50 = statistics.median(per_layer)
            reps = max(1, min(args.reps, int(args.loop_budget_s * 1e3 / (p50 * LAYERS))))
            times: dict[str, list[float]] = {label: [] for label in SCHEDULES}
            for _ in range(reps):  # alternate schedules so drifting load hits both alike
                for label, sched in SCHEDULES.items():
                    times[label] += timer(partial(_run_layers, sched, fn), 1)
            for label, sched in SCHEDULES.items():
                rows.append(
                    _row(
                        "indexer_78_layers",
                        name,
                        f"{case} {label}",
                        times[label],
                        meta,
                        t,
                        q_rows,
                        label,
                        sched.num_full,
                    )
                )
            _print_case(rows, case, name)
    for note in sorted(notes):
        print(note)
    for r in rows:
        r["note"] = "; ".join(sorted(notes)) or None
    return rows


def _run_layers(schedule: IndexerSchedule, compute: Callable) -> None:
    """One forward's gate and carry: every layer steps through one ``TopkCarry``."""
    carry = TopkCarry(schedule)
    for layer in range(schedule.num_layers):
        carry.step(layer, compute)


def _row(op, provider, case, times, meta, t, q_rows, schedule, computed) -> dict:
    if len(times) > 1:
        cuts = statistics.quantiles(times, n=10, method="inclusive")
        p20, p50, p80 = cuts[1], statistics.median(times), cuts[7]
    else:
        p20 = p50 = p80 = times[0]
    return {
        "op": op,
        "provider": provider,
        "case": case,
        "p50": p50,
        "p20": p20,
        "p80": p80,
        "unit": "ms",
        "reps": len(times),
        "seq_len": t,
        "query_rows": q_rows,
        "schedule": schedule,
        "computed_layers": computed,
        **meta,
    }


def _print_case(rows: list[dict], case: str, provider: str) -> None:
    mine = {
        r["schedule"]: r for r in rows if r["provider"] == provider and r["case"].startswith(case)
    }
    full, shared = mine["freq 1"]["p50"], mine["freq 4 offset 2"]["p50"]
    print(
        f"{case} | {provider:12s} | layer {mine[None]['p50']:9.2f} ms | 78 layers: freq 1 "
        f"{full:10.1f} ms, freq 4 {shared:10.1f} ms | shared/unshared {shared / full:.3f} "
        f"({'meets' if shared / full <= GOAL else 'misses'} <= {GOAL})"
    )


def render_md(rows: list[dict]) -> str:
    """The markdown table for docs/benchmarks/indexcache.md."""
    head = rows[0]
    device = head["gpu_name"] or f"CPU ({head['cpu']})"
    out = [
        f"Device: {device}; torch {head['torch']}; {head['timestamp']}; `{head['command']}`",
        "",
        "| T (keys) | Q rows | provider | 1 layer p50 (p20-p80) ms | 78 layers, freq 1 (ms) | "
        f"78 layers, freq 4 offset 2 (ms) | shared / unshared (goal <= {GOAL}) |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in (r for r in rows if r["op"] == "indexer_layer"):
        same = {
            x["schedule"]: x["p50"]
            for x in rows
            if x["provider"] == r["provider"] and x["seq_len"] == r["seq_len"] and x["schedule"]
        }
        ratio = same["freq 4 offset 2"] / same["freq 1"]
        out.append(
            f"| {r['seq_len']:,} | {r['query_rows']:,} | {r['provider']} | {r['p50']:.2f} "
            f"({r['p20']:.2f}-{r['p80']:.2f}) | "
            f"{same['freq 1']:.1f} | {same['freq 4 offset 2']:.1f} | {ratio:.3f} "
            f"{'(met)' if ratio <= GOAL else '(missed)'} |"
        )
    if head.get("note"):
        out += ["", head["note"]]
    return "\n".join(out)


def write_outputs(rows: list[dict], out: Path, md: Path | None, section: str) -> None:
    """JSON (merged with other devices' rows), PNG and the ``--md`` section of this run."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "indexcache.json"
    device = rows[0]["gpu_name"]  # None on CPU
    recorded = json.loads(path.read_text()) if path.exists() else []
    kept = [r for r in recorded if r["gpu_name"] != device]
    path.write_text(json.dumps(kept + rows, indent=2) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for prov in sorted({r["provider"] for r in rows}):
        for ax, op, sched in (
            (a, "indexer_layer", None),
            (b, "indexer_78_layers", "freq 1"),
            (b, "indexer_78_layers", "freq 4 offset 2"),
        ):
            pts = [
                (r["seq_len"], r["p50"])
                for r in rows
                if r["provider"] == prov and r["op"] == op and r["schedule"] == sched
            ]
            ax.plot(
                *zip(*pts, strict=True),
                marker="o",
                label=f"{prov}" + (f", {sched}" if sched else ""),
            )
    for ax, title in (
        (a, "one layer (one prefill chunk)"),
        (b, "78 layers: unshared vs IndexCache"),
    ):
        ax.set(xscale="log", yscale="log", xlabel="keys T", ylabel="p50 ms", title=title)
        ax.legend(fontsize=8)
    fig.suptitle(f"lightning indexer, {rows[0]['gpu_name'] or 'CPU'}")
    fig.tight_layout()
    fig.savefig(out / "indexcache.png", dpi=120)
    plt.close(fig)
    if md is not None:
        write_md_section(md, section, render_md(rows))


def write_md_section(md: Path, section: str, body: str) -> None:
    """Replace what lies between ``<!-- BEGIN section -->`` and ``<!-- END section -->`` in md."""
    begin, end = f"<!-- BEGIN {section} -->", f"<!-- END {section} -->"
    pre, has_begin, rest = md.read_text().partition(begin)
    _, has_end, post = rest.partition(end)
    if not (has_begin and has_end):
        raise SystemExit(f"{md} has no '{begin}' ... '{end}' section to replace")
    md.write_text(f"{pre}{begin}\n{body}\n{end}{post}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes for a CPU smoke run")
    p.add_argument("--cpu", action="store_true", help="stay on CPU even when CUDA is present")
    p.add_argument("--seq-lens", type=int, nargs="+", help="key counts T (default 8K..128K)")
    p.add_argument("--query-rows", type=int, default=4096, help="prefill chunk rows Q (4096)")
    p.add_argument("--reps", type=int, default=10, help="timed repetitions per case")
    p.add_argument("--loop-budget-s", type=float, default=60.0, help="time cap per 78-layer case")
    p.add_argument("--budget-gib", type=float, default=2.0, help="max float32 intermediate")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (1: a shared box's cores make OpenMP spin-waits dominate)",
    )
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    p.add_argument("--md", type=Path, help="markdown file whose marked section gets the table")
    p.add_argument("--md-section", help="section name (default: h200 on CUDA, cpu otherwise)")
    args = p.parse_args(argv)
    if args.quick:
        args.seq_lens = args.seq_lens or [1024, 2048, 4096]
        args.query_rows, args.reps = min(args.query_rows, 128), min(args.reps, 5)
    args.seq_lens = args.seq_lens or [8192, 16384, 32768, 65536, 131072]
    torch.manual_seed(0)
    if not torch.cuda.is_available() or args.cpu:
        torch.set_num_threads(args.threads)
    rows = bench(args)
    section = args.md_section or ("h200" if rows[0]["gpu_name"] else "cpu")
    write_outputs(rows, args.out, args.md, section)
    print(f"wrote {args.out / 'indexcache.json'} and {args.out / 'indexcache.png'}")


if __name__ == "__main__":
    main()
