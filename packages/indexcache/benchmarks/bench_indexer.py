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

Merges its rows into ``<out>/indexcache.json`` (rows of other devices, and of cases this run
did not measure again, are kept), draws ``<out>/indexcache.png`` from all of them and, with
``--md FILE``, rewrites each device's generated table in FILE (``<!-- indexcache <device>:begin
-->`` ... ``:end -->``; the prose around it is kept). ``--render`` does the writing alone, from
the JSON, without measuring.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import benchkit
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
    """Return ``time(fn, reps) -> [ms, ...]``: CUDA events on GPU, the wall clock on CPU; no
    untimed call (the caller warms up once per provider)."""

    def run(fn: Callable[[], object], reps: int) -> list[float]:
        if device.type == "cuda":
            samples = benchkit.cuda_event_times(fn, reps=reps, warmup=0)
        else:
            samples = benchkit.wall_times(fn, reps=reps, warmup=0)
        return [s * 1e3 for s in samples]

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
    command = shlex.join([Path(sys.executable).name, *(args.argv or sys.argv)])
    meta = benchkit.capture_env(device=device.type, package="indexcache", command=command)
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
            p50 = benchkit.quantiles(per_layer).p50
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
    q = benchkit.quantiles(times)  # times in ms already
    return {
        "op": op,
        "provider": provider,
        "case": case,
        "p50": q.p50,
        "p20": q.p20,
        "p80": q.p80,
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


def _device(row: dict) -> str:
    if row["gpu_name"]:
        return row["gpu_name"]
    threads = f", {row['cpu_threads']} thread(s)" if row.get("cpu_threads") else ""
    return f"CPU ({row['cpu']}{threads})"


def render_md(rows: list[dict]) -> str:
    """The markdown table of one device's rows, for docs/benchmarks/indexcache.md: a line per run
    behind them (device, torch, time, command), then a row per key count and provider."""
    runs = {(r["timestamp"], r["command"]): r for r in rows}
    out = [
        f"Device: {_device(r)}; torch {r['torch']}; {stamp}; `{command}`"
        for (stamp, command), r in runs.items()
    ]
    out += [
        "",
        "| T (keys) | Q rows | provider | 1 layer p50 (p20-p80) ms | 78 layers, freq 1 (ms) | "
        f"78 layers, freq 4 offset 2 (ms) | shared / unshared (goal <= {GOAL}) |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    layer_rows = sorted((r for r in rows if r["op"] == "indexer_layer"), key=lambda r: r["seq_len"])
    for r in layer_rows:
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
    notes = list(dict.fromkeys(r["note"] for r in rows if r.get("note")))
    return "\n".join(out + (["", *notes] if notes else []))


def _by_device(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(benchkit.device_label(r), []).append(r)
    return out


def sections(rows: list[dict]) -> dict[str, str]:
    """One generated table per device: ``indexcache NVIDIA H200``, ``indexcache cpu``."""
    return {f"indexcache {dev}": render_md(mine) for dev, mine in _by_device(rows).items()}


def figure(rows: list[dict]) -> benchkit.Figure:
    """p50 against keys T: one layer, and 78 layers unshared vs IndexCache, per device."""
    several = len(_by_device(rows)) > 1

    def label(r: dict) -> str:
        where = f"{'CPU' if r['gpu_name'] is None else r['gpu_name']} " if several else ""
        return where + r["provider"] + (f", {r['schedule']}" if r["schedule"] else "")

    one = benchkit.lines_from_rows(
        [r for r in rows if r["op"] == "indexer_layer"], x="seq_len", label=label
    )
    all_layers = benchkit.lines_from_rows(
        [r for r in rows if r["op"] == "indexer_78_layers"], x="seq_len", label=label
    )
    log = {"xscale": "log", "yscale": "log"}
    return benchkit.Figure(
        [
            benchkit.Panel("one layer (one prefill chunk)", "keys T", "p50 ms", one, **log),
            benchkit.Panel(
                "78 layers: unshared vs IndexCache", "keys T", "p50 ms", all_layers, **log
            ),
        ],
        title="lightning indexer",
        ncols=2,
    )


REPORT = benchkit.Report(name="indexcache", figure=figure, sections=sections)


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
    p.add_argument("--md", type=Path, help="markdown file whose generated tables are rewritten")
    p.add_argument("--render", action="store_true", help="write PNG and --md from the JSON only")
    args = p.parse_args(argv)
    args.argv = None if argv is None else [sys.argv[0], *argv]
    if args.render:
        REPORT.publish([], args.out, md=args.md)
        return
    if args.quick:
        args.seq_lens = args.seq_lens or [1024, 2048, 4096]
        args.query_rows, args.reps = min(args.query_rows, 128), min(args.reps, 5)
    args.seq_lens = args.seq_lens or [8192, 16384, 32768, 65536, 131072]
    torch.manual_seed(0)
    if not torch.cuda.is_available() or args.cpu:
        torch.set_num_threads(args.threads)
    rows = bench(args)
    REPORT.publish(rows, args.out, md=args.md)
    print(f"wrote {args.out / 'indexcache.json'} and {args.out / 'indexcache.png'}")


if __name__ == "__main__":
    main()
