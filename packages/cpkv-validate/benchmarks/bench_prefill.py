"""Reference-engine prefill per layer under CP, plus the contamination table, on GPUs.

Two parts, one run:

1. ``validate``: every cpkv-validate scenario on the GPU (tiny model, float64), cp 1 on one GPU
   and cp N over NCCL, both splits, with the per-request inverse (must PASS) and the legacy one
   (must FAIL); the tables go into ``validate.md``.
2. ``prefill``: one request of 32K / 128K tokens prefilled in one chunk through the reference
   engine with GLM-5 attention dimensions (64 heads, kv_lora 512 + rope 64 = 576-wide latent,
   indexer 32 x 128, top-k 2048, page 64, bf16), cp 1 vs cp 2 (NCCL). Reported: wall time per
   layer (p50/p20/p80 over ``--reps``) and its phases: the cpkv_runtime ops (plan_layout,
   materialize, fill_current, remap_locs), indexer scores, top-k, sparse attention,
   projections + MLP and the all-gather, each with its speed-up over cp 1, per backend
   (``--backends``). ``report_cp_scaling.py`` turns the rows into the CP scaling record.

Writes ``validate.json`` (rows; a rerun replaces only the rows it measured again),
``validate.png`` (ms/layer vs tokens) and ``validate.md`` (a validate and a prefill section per
machine) under ``--out``, through benchkit (record, merge, plot, sections). ``--render`` rewrites
the JSON and PNG from the recorded rows alone (the Markdown sections need the run's settings).
With plain ``python3`` (no install), put ``tools/benchkit/src`` on ``PYTHONPATH`` beside
``packages/*/src``.

    uv run python packages/cpkv-validate/benchmarks/bench_prefill.py --cp 1 2 --out docs/benchmarks
    uv run python packages/cpkv-validate/benchmarks/bench_prefill.py --render
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import ClassVar

import benchkit
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _prefill_rows import (
    PHASE_OPS,
    PHASES,
    load_rows,
    merged,
    p50_index,
    phase_ms,
    phase_op,
    speedups,
)
from cpkv_validate import PRESETS, Engine, Options, init_weights, run_reference_many
from cpkv_validate import _engine as engine_mod
from cpkv_validate import _model as model_mod
from cpkv_validate import _step as step_mod
from cpkv_validate._dist import free_port
from cpkv_validate._rt import DistComm, LocalComm
from cpkv_validate._runner import DTYPES

KERNEL_BACKENDS = "cpkv_kernels._registry:triton_backend,cpkv_kernels._registry:cuda_backend"


def _register_kernels() -> str:
    """Make the Triton/CUDA backends visible when cpkv-kernels is on PYTHONPATH, not installed.

    Registers them in this process and sets ``CPKV_EXTRA_BACKENDS`` so the CP worker processes
    (spawned later, they inherit the environment) find them too.
    """
    try:
        import cpkv_kernels
    except ImportError as exc:
        return f"cpkv_kernels not importable ({exc}); torch backend only"
    os.environ.setdefault("CPKV_EXTRA_BACKENDS", KERNEL_BACKENDS)
    try:
        cpkv_kernels.register()
        return "cpkv_kernels registered"
    except Exception as exc:  # report, keep benchmarking the torch backend
        return f"cpkv_kernels.register() failed: {type(exc).__name__}: {exc}"


class _PhaseTimer:
    """Wraps the functions the engine calls per phase; sums each phase's CUDA-event (or CPU) time.

    Phases: the cpkv_runtime ops, then the reference model's own pieces, so a layer's time can
    be split and each part's scaling with cp read off. A phase's time runs from the call's start
    to its end on the stream, host waits inside it included; time outside every phase is "other".
    """

    # phase -> (module or class the engine looks the function up on, attribute name)
    SITES: ClassVar[dict[str, list[tuple[object, str]]]] = {
        "cpkv_ops": [
            (engine_mod, "plan_layout"),
            (step_mod, "materialize"),
            (step_mod, "fill_current"),
            (step_mod, "remap_locs"),
        ],
        "indexer_scores": [(model_mod, "index_scores")],
        "topk": [(model_mod, "select_topk")],
        "sparse_attention": [(model_mod, "absorbed_attention")],
        "projections_mlp": [
            (model_mod, "attention_inputs"),
            (model_mod, "attention_output"),
            (model_mod, "mlp"),
        ],
        "all_gather": [(DistComm, "all_gather"), (LocalComm, "all_gather")],
    }

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.events: dict[str, list] = {name: [] for name in PHASES}
        self.cpu_ms = dict.fromkeys(PHASES, 0.0)
        sites = [(phase, site, attr) for phase in PHASES for site, attr in self.SITES[phase]]
        self.orig = [(site, attr, getattr(site, attr)) for _, site, attr in sites]
        for phase, site, attr in sites:
            setattr(site, attr, self._wrap(phase, getattr(site, attr)))

    def _wrap(self, phase: str, fn):
        def timed(*a, **k):
            if not self.cuda:
                t0 = time.perf_counter()
                out = fn(*a, **k)
                self.cpu_ms[phase] += (time.perf_counter() - t0) * 1e3
                return out
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*a, **k)
            end.record()
            self.events[phase].append((start, end))
            return out

        return timed

    def take_ms(self) -> dict[str, float]:
        """Milliseconds per phase since the last call (and reset)."""
        if not self.cuda:
            ms, self.cpu_ms = self.cpu_ms, dict.fromkeys(PHASES, 0.0)
            return ms
        torch.cuda.synchronize()
        ms = {p: sum(s.elapsed_time(e) for s, e in ev) for p, ev in self.events.items()}
        for ev in self.events.values():
            ev.clear()
        return ms

    def restore(self) -> None:
        for site, attr, fn in self.orig:
            setattr(site, attr, fn)


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _time_prefill(args, tokens: int, backend: str | None, comm) -> tuple[list, dict]:
    """Prefill one request of ``tokens`` tokens in one chunk, ``warmup + reps`` times.

    Returns the wall ms per layer of each timed rep and, per phase, its ms per layer.
    """
    cuda, layers = args.device == "cuda", args.layers
    cfg = PRESETS[args.preset].with_(num_hidden_layers=layers, index_topk_freq=1)
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    w = init_weights(cfg, seed=0, dtype=DTYPES[args.dtype], device=dev)
    pages = -(-tokens // cfg.page_size) + 8
    eng = Engine(
        cfg,
        w,
        num_pages=pages,
        comm=comm,
        split="zigzag",
        prefix_cache=False,
        backend=backend,
        q_chunk=args.q_chunk,
        stable_topk=False,
    )
    ids = torch.randint(0, 448, (tokens,), generator=torch.Generator().manual_seed(1)).tolist()
    timer = _PhaseTimer(cuda)
    walls: list[float] = []
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    try:
        for rep in range(args.warmup + args.reps):
            name = f"r{rep}"
            eng.admit(name, ids)
            if comm.world > 1:
                dist.barrier()
            _sync(cuda)
            timer.take_ms()
            t0 = time.perf_counter()
            eng.step([(name, tokens)])
            _sync(cuda)
            if comm.world > 1:
                dist.barrier()
            wall = (time.perf_counter() - t0) * 1e3 / layers
            phase_ms = timer.take_ms()
            eng.finish(name)
            if rep >= args.warmup:
                walls.append(wall)
                for phase, ms in phase_ms.items():
                    phases[phase].append(ms / layers)
    finally:
        timer.restore()
    del eng, w
    if cuda:
        torch.cuda.empty_cache()
    return walls, phases


def _quantiles(xs: list[float]) -> dict[str, float]:
    q = benchkit.quantiles(xs)  # samples in ms already
    return {"p50": q.p50, "p20": q.p20, "p80": q.p80}


def _cases(args):
    return [(t, b) for t in args.tokens for b in args.backends]


def _worker(rank: int, args, cp: int, port: int, path: str) -> None:
    _register_kernels()
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        # as in main(): spawned ranks start with torch's defaults, and cp 1 runs with TF32 on
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        torch.set_num_threads(1)
    extra = {"device_id": torch.device("cuda", rank)} if cuda else {}
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=cp,
        **extra,
    )
    try:
        out = [(t, b, *_time_prefill(args, t, b, DistComm())) for t, b in _cases(args)]
        if rank == 0:
            Path(path).write_text(json.dumps(out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _prefill_rows(args, meta) -> list[dict]:
    rows = []
    for cp in args.cp:
        if cp == 1:
            res = [(t, b, *_time_prefill(args, t, b, LocalComm())) for t, b in _cases(args)]
        else:
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "prefill.json"
                mp.spawn(_worker, args=(args, cp, free_port(), str(path)), nprocs=cp, join=True)
                res = json.loads(path.read_text())
        for tokens, backend, walls, phases in res:
            series = [("prefill_layer", walls)] + [(phase_op(p), xs) for p, xs in phases.items()]
            for op, xs in series:
                rows.append(
                    {
                        "op": op,
                        "provider": backend or "auto",
                        "case": f"tokens={tokens} cp={cp}",
                        "tokens": tokens,
                        "cp": cp,
                        "device": args.device,
                        "model": f"{args.preset} {args.dtype} layers={args.layers}",
                        **_quantiles(xs),
                        "unit": "ms",
                        **meta,
                    }
                )
    return rows


def _validate_rows(args, meta) -> tuple[list[dict], list[str]]:
    rows, md = [], []
    for cp in args.cp:
        runs = [
            Options(scenarios=list(args.scenarios), cp=cp, split=s, inverse=i, device=args.device)
            for s in ("zigzag", "interleave")
            for i in ("per-request", "legacy")
        ]
        t0 = time.perf_counter()
        results = run_reference_many(runs)
        wall = time.perf_counter() - t0
        for o, res in zip(runs, results, strict=True):
            expect_ok = o.inverse == "per-request"
            # legacy must be caught somewhere; the scenarios with nothing shared pass under it
            good = all(s.ok for s in res) == expect_ok
            md.append(
                f"\n#### cp={cp} split={o.split} inverse={o.inverse} — "
                f"{'as expected' if good else 'UNEXPECTED'}\n"
            )
            md.append(
                "| scenario | requests | rows | max abs diff | verdict | leaks (victim ← source) |"
            )
            md.append("|---|---:|---:|---:|---|---|")
            for s in res:
                worst = max(r.max_abs_diff for r in s.requests)
                leaks = ", ".join(
                    f"{r.request} ← {'/'.join(r.leak_sources) or '?'}"
                    for r in s.requests
                    if r.verdict == "FAIL"
                )
                md.append(
                    f"| {s.name} | {len(s.requests)} | {sum(r.rows for r in s.requests)} | "
                    f"{worst:.2e} | {'PASS' if s.ok else 'FAIL'} | {leaks or '—'} |"
                )
                for r in s.requests:
                    rows.append(
                        {
                            "op": "validate",
                            "provider": args.backends[0] or "auto",
                            "case": f"cp={cp} split={o.split} inverse={o.inverse} "
                            f"{s.name}/{r.request}",
                            "device": args.device,
                            "cp": cp,
                            "verdict": r.verdict,
                            "max_abs_diff": r.max_abs_diff,
                            "leak_sources": r.leak_sources,
                            **meta,
                        }
                    )
            print(
                f"validate cp={cp} {o.split} {o.inverse}: "
                f"{sum(s.ok for s in res)}/{len(res)} scenarios PASS "
                f"({'as expected' if good else 'UNEXPECTED'})"
            )
        md.append(f"\n(cp={cp}: 4 runs in {wall:.1f}s)\n")
    return rows, md


def _figure(rows: list[dict]) -> benchkit.Figure:
    """ms per layer against tokens: the whole layer and its cpkv ops, per machine, cp, backend."""
    prefill = [r for r in rows if r["op"] in ("prefill_layer", "cpkv_ops_per_layer")]

    def label(r: dict) -> str:
        what = "layer" if r["op"] == "prefill_layer" else "cpkv ops"
        return f"{what} cp={r['cp']} {r['provider']} ({r['where']})"

    def style(name: str) -> dict[str, object]:
        return {} if name.startswith("layer") else {"linestyle": "--", "marker": "x"}

    lines = benchkit.lines_from_rows(prefill, x="tokens", label=label, style=style)
    panel = benchkit.Panel(
        "cpkv-validate reference engine: prefill time per layer",
        "prefill tokens (one request, one chunk)",
        "ms per layer (p50)",
        lines,
        xscale="log",
        yscale="log",
    )
    return benchkit.Figure([panel], panel_size=(7.0, 4.5))


def _write_record(rows: list[dict], out: Path) -> None:
    """``validate.json`` (benchkit's record) and, where there are prefill rows, ``validate.png``."""
    benchkit.write_record(out / "validate.json", "validate", rows)
    if any(r["op"] == "prefill_layer" for r in rows):
        benchkit.write_png(out / "validate.png", _figure(rows))


def _prefill_table(prows: list[dict]) -> list[str]:
    lines = [
        "| tokens | cp | provider | ms/layer p50 (p20–p80) | cpkv ops ms/layer | vs cp 1 |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    base = {
        (r["tokens"], r["provider"]): r["p50"]
        for r in prows
        if r["op"] == "prefill_layer" and r["cp"] == 1
    }
    for r in (r for r in prows if r["op"] == "prefill_layer"):
        op = next(
            x
            for x in prows
            if x["op"] == "cpkv_ops_per_layer"
            and x["case"] == r["case"]
            and x["provider"] == r["provider"]
        )
        ref = base.get((r["tokens"], r["provider"]))
        ratio = f"{ref / r['p50']:.2f}x" if ref else "—"
        lines.append(
            f"| {r['tokens']} | {r['cp']} | {r['provider']} | {r['p50']:.1f} "
            f"({r['p20']:.1f}–{r['p80']:.1f}) | {op['p50']:.2f} | {ratio} |"
        )
        print(
            f"tokens={r['tokens']:>6} cp={r['cp']} | {r['provider']:6s} | {r['p50']:9.1f} "
            f"ms/layer | cpkv ops {op['p50']:7.2f} ms/layer | {ratio} vs cp 1"
        )
    return lines + _phase_table(prows)


def _phase_table(prows: list[dict]) -> list[str]:
    """ms/layer (p50) per phase, and each phase's speed-up over cp 1 in brackets."""
    p50 = p50_index(prows)
    if not any(k[0].startswith("phase:") for k in p50):
        return []
    names = [p.removeprefix("phase:").removesuffix("_per_layer") for p in PHASE_OPS]
    lines = [
        "",
        "Where a layer's time goes (ms/layer p50; in brackets the speed-up over cp 1). "
        '"other" is the layer time outside every timed phase.',
        "",
        f"| tokens | cp | provider | {' | '.join(names)} | other |",
        "|---:|---:|---|" + "---:|" * (len(names) + 1),
    ]
    for r in (r for r in prows if r["op"] == "prefill_layer"):
        phases = phase_ms(p50, r["tokens"], r["cp"], r["provider"])
        gain = speedups(phases, phase_ms(p50, r["tokens"], 1, r["provider"])) if r["cp"] > 1 else {}
        cells = [
            f"{phases.get(op, 0.0):.1f}" + (f" ({gain[op]:.2f}x)" if op in gain else "")
            for op in [*PHASE_OPS, "other"]
        ]
        lines.append(f"| {r['tokens']} | {r['cp']} | {r['provider']} | {' | '.join(cells)} |")
    print("\n".join(lines))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default=None,
        help="cuda (default when visible; NCCL) or cpu (gloo, tiny model)",
    )
    p.add_argument("--cp", type=int, nargs="+", default=[1, 2], help="CP sizes (one GPU per rank)")
    p.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=None,
        help="prefill lengths (default 32768 131072 on cuda, 1024 4096 on cpu)",
    )
    p.add_argument(
        "--backends",
        nargs="+",
        default=["auto", "torch"],
        help="cpkv_runtime backends compared side by side (auto = cuda > triton > torch)",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="model dims (default glm5 on cuda, tiny on cpu)",
    )
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default=None,
        help="prefill dtype (default bfloat16 on cuda, float32 on cpu)",
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--layers", type=int, default=2, help="layers, every one a full indexer layer")
    p.add_argument("--q-chunk", type=int, default=256, help="queries per indexer/attention chunk")
    p.add_argument("--scenarios", nargs="+", default=None, help="validate scenarios (default all)")
    p.add_argument("--skip-validate", action="store_true")
    p.add_argument("--skip-prefill", action="store_true")
    p.add_argument(
        "--doc",
        default="docs/benchmarks/validate.md",
        help="markdown to update (its section for this machine is replaced)",
    )
    p.add_argument("--out", default="docs/benchmarks", help="where validate.{md,json,png} go")
    p.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: rewrite validate.json and validate.png under --out from the rows "
        "recorded in --doc's JSON",
    )
    args = p.parse_args()
    if args.render:
        rows = load_rows(Path(args.doc).with_suffix(".json"))
        if not rows:
            p.error(f"--render: no rows in {Path(args.doc).with_suffix('.json')}; run it first")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        _write_record(rows, Path(args.out))
        print(f"rendered {len(rows)} recorded rows into {args.out}/validate.json, validate.png")
        return 0
    cuda = torch.cuda.is_available()
    args.device = args.device or ("cuda" if cuda else "cpu")
    if args.device == "cuda":
        if not cuda:
            p.error("--device cuda: no CUDA device visible")
        if max(args.cp) > torch.cuda.device_count():
            p.error(
                f"--cp {max(args.cp)} needs that many GPUs; {torch.cuda.device_count()} visible"
            )
    gpu = args.device == "cuda"
    args.tokens = args.tokens or ([32768, 131072] if gpu else [1024, 4096])
    args.preset = args.preset or ("glm5" if gpu else "tiny")
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    from cpkv_validate import scenario_names

    args.scenarios = args.scenarios or scenario_names()
    args.backends = [None if b == "auto" else b for b in args.backends]
    torch.backends.cuda.matmul.allow_tf32 = True  # the indexer's fp32 scores; DeepGEMM uses fp8
    if not gpu:
        torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kernels = _register_kernels()
    where = (
        f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
        if gpu
        else f"CPU x{os.cpu_count()}"
    )
    meta = {
        **benchkit.capture_env(device=args.device, package="cpkv-validate"),
        "where": where,
        "kernels": kernels,
        "command": " ".join(["python3", *sys.argv]),
    }
    print(f"{where}, torch {meta['torch']}, {kernels}")
    vrows, md = ([], []) if args.skip_validate else _validate_rows(args, meta)
    prows = [] if args.skip_prefill else _prefill_rows(args, meta)
    lines = _prefill_table(prows) if prows else []
    # Merge with the recorded rows: only the measurements this run made again are replaced
    # (same machine, op, case and provider), so a --skip-validate run keeps the validate rows.
    rows = merged(load_rows(Path(args.doc).with_suffix(".json")), vrows + prows)
    _write_record(rows, out)
    all_prefill = [r for r in rows if r["op"] == "prefill_layer"]
    model = PRESETS[args.preset]
    head = [
        f"### {where} — torch {meta['torch']}, CUDA {meta['cuda']}, {meta['timestamp']}",
        "",
        f"Command: `{meta['command']}`. Kernels: {kernels}.",
        "",
    ]
    section: list[str] = []
    if lines:
        section += [
            f"Prefill time per layer: one request prefilled in one chunk, `{args.preset}` dims "
            f"({model.num_attention_heads} heads, latent {model.latent_dim}, indexer "
            f"{model.index_n_heads}x{model.index_head_dim}, top-k {model.index_topk}, page "
            f"{model.page_size}), {args.dtype}, zigzag split, {args.layers} full layers; "
            f"p50 of {args.reps} after {args.warmup} warm-up.",
            "",
            *lines,
            "",
        ]
    # prefill and validate results are separate sections, so one part's run keeps the other's
    target = out / "validate.md"
    if not target.exists() or target.resolve() != Path(args.doc).resolve():
        doc = Path(args.doc).read_text() if Path(args.doc).exists() else "# cpkv-validate\n"
        target.write_text(doc)
    sections = {}
    if section:
        sections[f"prefill {where}"] = "\n".join(head + section)
    if md:
        sections[f"validate {where}"] = "\n".join(head + md)
    benchkit.write_sections(target, sections)  # the prose around the sections is kept
    print(
        f"wrote {out}/validate.json, {out}/validate.md" + (", validate.png" if all_prefill else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
