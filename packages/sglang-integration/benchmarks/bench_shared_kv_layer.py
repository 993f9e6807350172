"""One DSA layer of GLM-5.1 on one GPU: ``cpkv_runtime``'s ``LayerStep`` beside a full replica.

This is the runtime's own design, not the pool ``--cpkv-shared-kv`` installs. ``LayerStep``
materialises, per layer, a dense scratch of the pages each request reads from a full local pool
(no sharding, no all-gather), and remaps the top-k into it; ``CpkvSharedKVPool`` instead keeps
1/N of the pages, gathers the history pages per layer into SGLang's scratch slots and lets
SGLang's backend read through page tables translated once per forward. Neither SGLang's
``DeepseekSparseAttnBackend`` nor any SGLang pool or indexer runs here: the indexer is DeepGEMM's
fp8 ``mqa_logits`` (through ``deepgemm_compat``) and ``torch.topk``, and SGLang's Triton
``sparse_mla_prefill`` kernel is called directly. The pool through SGLang's backend is
``bench_shared_kv_vs_upstream.py``.

For each case (8 requests x (64K shared prefix + 2K new), 1 request x 64K, 1 x 128K; the single
requests are prefilled whole, no prefix) it times, with CUDA events (p20/p50/p80):

- **plan**, once per forward: ``plan_layout`` (the definition, host syncs), ``plan_layout_static``
  validated (one sync) and unvalidated (none), per backend, and ``prepare_layer_step``;
- **cpkv ops**, per layer: materialize + fill_current + remap_locs (one ``LayerStep``), eager and
  replayed in a CUDA graph, plus the host cost of launching it (wall clock of 78 back-to-back
  layers without a sync, per layer);
- **indexer** (both paths): DeepGEMM fp8 ``mqa_logits`` via ``deepgemm_compat`` + ``torch.topk``;
- **attention**: SGLang's Triton ``sparse_mla_prefill`` over (a) the cpkv scratch and (b) the
  whole pool with pool locations (a full replica: nothing materialised);
- the whole layer on each path, eager and (where it captures) in a CUDA graph.

The page's table (``--md``) shows no CUDA-graph time: SGLang runs prefill eager under KV sharding
(``handle_kv_cache_sharding`` turns prefill CUDA graphs off); the replays stay in the JSON.
Headline: the cpkv path's share of layer time, ``(cpkv ops + plan / 78) / layer``. Both paths'
attention outputs must be bitwise equal (same rows, same order), and the cpkv scratch and remapped
indices must equal the torch definition's; the record says so per case.

    python3 packages/sglang-integration/benchmarks/bench_shared_kv_layer.py --out DIR
    python3 packages/sglang-integration/benchmarks/bench_shared_kv_layer.py --dry --out DIR
    uv run --frozen python packages/sglang-integration/benchmarks/bench_shared_kv_layer.py \\
        --render --out docs/benchmarks --md docs/benchmarks/shared-kv-layer.md

``--dry`` (CPU): toy sizes, imports and signatures of the real kernels checked, the GPU kernels
replaced by float32 torch stand-ins (so the pipeline, shapes, parity checks and writers run).
``--render`` (CPU): the PNG and ``--md``'s table from ``--out``'s JSON, measuring nothing.
Writes ``shared-kv-layer.json`` and ``shared-kv-layer.png`` under ``--out`` and prints a table.
The record, table and plot are benchkit's (``{"benchmark", "rows"}`` JSON: every timed row with
the environment, then one ``phase="summary"`` row per case); the timers stay in ``_layer_io.py``.
"""

from __future__ import annotations

import argparse
import inspect
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import benchkit
import cpkv_runtime as cr
import torch
from _layer_cases import (
    CASES,
    DRY_CASE,
    DRY_DIMS,
    Dims,
    Indexer,
    Inputs,
    build_inputs,
    load_sparse_mla,
    mqa_logits_reference,
    sparse_mla_reference,
)
from _layer_io import (
    Clock,
    Row,
    Times,
    capture_env,
    wall_times,
)

GOALS = {"plan_us": 100.0, "host_us_per_layer": 30.0, "share": 0.05}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the JSON and PNG")
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    ap.add_argument("--backends", nargs="+", default=["cuda", "triton"], help="cpkv op backends")
    ap.add_argument("--heads", type=int, default=64, help="attention heads per rank (CP 8: 64)")
    ap.add_argument("--budget-s", type=float, default=1.5, help="timing budget per quantity")
    ap.add_argument(
        "--no-layer-graph", action="store_true", help="skip capturing the whole layer in a graph"
    )
    ap.add_argument("--dry", action="store_true", help="CPU: toy sizes, torch stand-ins")
    ap.add_argument("--md", type=Path, help="page whose generated table is rewritten")
    ap.add_argument(
        "--render", action="store_true", help="PNG and --md from --out's JSON, no measuring"
    )
    return ap.parse_args(argv)


def _bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    )


def register_kernels() -> str:
    """Make the Triton/CUDA backends visible when cpkv-kernels is on PYTHONPATH, not installed."""
    try:
        import cpkv_kernels

        found = cpkv_kernels.register()
    except Exception as exc:  # report it; the torch backend still runs
        return f"cpkv_kernels not registered: {type(exc).__name__}: {exc}"
    return ", ".join(f"{n}: {'ok' if b.available else b.reason}" for n, b in found.items())


class Layer:
    """One forward of one layer on both paths, with its parity checks."""

    def __init__(self, inp: Inputs, backend: str, mqa_logits, attention) -> None:
        self.inp, self.attention = inp, attention
        d = inp.dims
        self.layout = cr.plan_layout_static(
            inp.req_pages, inp.prefix, inp.extend, d.page_size, inp.num_pages,
            max_slots=inp.capacity, num_tokens=inp.case.tokens, backend=backend,
        )  # fmt: skip
        self.step = cr.prepare_layer_step(self.layout, inp.token_req, inp.loc, backend=backend)
        self.indexer = Indexer(inp, mqa_logits)
        self.topk = self.indexer().clone()  # fixed top-k for the per-phase timings
        self.dense = inp.kv_pool.new_empty((self.layout.num_slots, d.page_size, d.d_qk))
        self.dense_locs = torch.empty_like(self.topk)
        t = inp.case.tokens
        self.out_cpkv = inp.q.new_empty((t, d.heads, d.d_v))
        self.out_replica = inp.q.new_empty((t, d.heads, d.d_v))

    def cpkv_ops(self) -> None:
        self.step(self.inp.kv_pool, self.inp.current_kv, self.topk, self.dense, self.dense_locs)

    def build_dense(self) -> None:
        self.step.build_dense(self.inp.kv_pool, self.inp.current_kv, self.dense)

    def remap(self) -> None:
        self.step.remap(self.topk, self.dense_locs)

    def attend(self, kv: torch.Tensor, locs: torch.Tensor, out: torch.Tensor) -> None:
        d = self.inp.dims
        self.attention(self.inp.q, kv.view(-1, d.d_qk), locs, d.sm_scale, d.d_v, out=out)

    def attention_cpkv(self) -> None:
        self.attend(self.dense, self.dense_locs, self.out_cpkv)

    def attention_replica(self) -> None:
        self.attend(self.inp.kv_pool, self.topk, self.out_replica)

    def layer_cpkv(self) -> None:
        self.step.build_dense(self.inp.kv_pool, self.inp.current_kv, self.dense)
        self.step.remap(self.indexer(), self.dense_locs)
        self.attend(self.dense, self.dense_locs, self.out_cpkv)

    def layer_replica(self) -> None:
        self.attend(self.inp.kv_pool, self.indexer(), self.out_replica)

    def parity(self) -> dict[str, bool]:
        """cpkv scratch and indices == the torch definition; both paths' outputs bitwise equal."""
        inp = self.inp
        self.cpkv_ops()
        self.attention_cpkv()
        self.attention_replica()
        exact = cr.plan_layout(
            inp.req_pages, inp.prefix, inp.extend, inp.dims.page_size, inp.num_pages
        )
        want = cr.materialize(inp.kv_pool, exact, backend="torch")
        cr.fill_current(want, inp.current_kv, inp.token_req, inp.loc, exact, backend="torch")
        want_locs = cr.remap_locs(self.topk, inp.token_req, exact, backend="torch")
        return {
            "scratch_equals_torch_path": _bytes_equal(self.dense[: exact.num_slots], want),
            "indices_equal_torch_path": torch.equal(self.dense_locs, want_locs),
            "attention_cpkv_equals_replica": _bytes_equal(self.out_cpkv, self.out_replica),
        }


def host_per_layer(step_fn, layers: int, clock: Clock) -> Times:
    """Wall time of launching ``layers`` layers back to back (no sync inside), per layer."""
    samples = []
    for _ in range(7):
        clock.sync()
        t0 = time.perf_counter()
        for _ in range(layers):
            step_fn()
        samples.append((time.perf_counter() - t0) * 1e6 / layers)
        clock.sync()
    return Times.of(samples)


def plan_rows(inp: Inputs, backends: list[str], clock: Clock) -> list[Row]:
    """Per-forward planning: the definition, then ``plan_layout_static`` on every backend."""
    name, d, rows = inp.case.name, inp.dims, []
    args = (inp.req_pages, inp.prefix, inp.extend, d.page_size, inp.num_pages)

    def add(phase: str, mode: str, t: Times, **meta: object) -> None:
        rows.append(Row.timed(name, phase, "cpkv", mode, t, **meta))

    add("plan", "host", wall_times(lambda: cr.plan_layout(*args), reps=10),
        variant="plan_layout (definition)")  # fmt: skip
    known = cr.available_backends()
    for b in dict.fromkeys(["torch", *backends]):
        if b not in known or not known[b].supports("plan_slots", inp.req_pages.device):
            rows.append(Row(name, "plan", "cpkv", "host", note=f"{b}: not available here"))
            continue
        kw = {"max_slots": inp.capacity, "num_tokens": inp.case.tokens, "backend": b}

        def checked(kw=kw) -> cr.Layout:
            return cr.plan_layout_static(*args, **kw)

        def free(kw=kw) -> cr.Layout:
            return cr.plan_layout_static(*args, validate=False, **kw)

        planned = free()

        def prepare(layout=planned, b=b) -> cr.LayerStep:
            return cr.prepare_layer_step(layout, inp.token_req, inp.loc, backend=b, validate=False)

        add("plan", "host", wall_times(checked), backend=b,
            variant="plan_layout_static validate=True (1 sync)")  # fmt: skip
        add("plan", "host", wall_times(free, sync=False), backend=b,
            variant="plan_layout_static validate=False (launch)")  # fmt: skip
        add("plan", "eager", clock.events(free), backend=b,
            variant="plan_layout_static validate=False (stream time)")  # fmt: skip
        add("prepare", "host", wall_times(prepare, sync=False), backend=b,
            variant="prepare_layer_step validate=False")  # fmt: skip
    return rows


def measure_case(
    inp: Inputs, backends: list[str], clock: Clock, mqa_logits, attention, layer_graph: bool
) -> tuple[list[Row], dict]:
    """Every phase of one case; the first backend also times the indexer, attention and layer."""
    name, layers = inp.case.name, inp.dims.layers
    rows = plan_rows(inp, backends, clock)
    summary: dict[str, object] = {"capacity": inp.capacity, "tokens": inp.case.tokens}

    def add(phase: str, path: str, mode: str, t: Times | None, **meta: object) -> None:
        if t is None:
            rows.append(Row(name, phase, path, mode, note="CUDA graphs need a GPU", meta=meta))
        else:
            rows.append(Row.timed(name, phase, path, mode, t, **meta))

    for b in backends:
        layer = Layer(inp, b, mqa_logits, attention)
        summary[f"parity[{b}]"] = layer.parity()
        summary[f"used_slots[{b}]"] = int(layer.layout.used_slots)
        meta = {"backend": b, "ran_on": sorted(set(layer.step.backends.values()))}
        add("cpkv_ops", "cpkv", "eager", clock.events(layer.cpkv_ops), **meta)
        add("cpkv_ops", "cpkv", "graph", clock.graph(layer.cpkv_ops), **meta)
        host = host_per_layer(layer.cpkv_ops, layers, clock)
        add("cpkv_ops", "cpkv", "host", host, **meta, variant=f"launch, per layer of {layers}")
        if b == backends[0]:
            for phase, path, fn in (
                ("cpkv_ops: materialize + fill", "cpkv", layer.build_dense),
                ("cpkv_ops: remap", "cpkv", layer.remap),
                ("indexer", "both", layer.indexer),
                ("attention", "cpkv", layer.attention_cpkv),
                ("attention", "replica", layer.attention_replica),
                ("layer", "cpkv", layer.layer_cpkv),
                ("layer", "replica", layer.layer_replica),
            ):
                add(phase, path, "eager", clock.events(fn), backend=b)
            summary.update(_headline(rows, name, b, layers))
            if layer_graph:  # last: a failed capture cannot touch the numbers above
                for path, fn in (("cpkv", layer.layer_cpkv), ("replica", layer.layer_replica)):
                    eager = _p50(rows, name, "layer", path, "eager") or 0.0
                    rows.append(_graph_row(name, "layer", path, fn, eager, clock, b))
        del layer
    return rows, summary


def _graph_row(case, phase, path, fn, eager_p50: float, clock: Clock, backend) -> Row:
    if not clock.cuda:
        return Row(case, phase, path, "graph", note="CUDA graphs need a GPU")
    if eager_p50 > 250e3:
        return Row(case, phase, path, "graph", note="skipped: > 250 ms eager, launches negligible")
    try:
        t = clock.graph(fn)
    except Exception as exc:  # report why the layer does not capture; the rest stands
        clock.sync()
        return Row(case, phase, path, "graph", note=f"{type(exc).__name__}: {str(exc)[:160]}")
    assert t is not None  # a CUDA clock always times
    return Row.timed(case, phase, path, "graph", t, backend=backend)


def _p50(rows: list[Row], case: str, phase: str, path: str, mode: str, **meta) -> float | None:
    for r in rows:
        if (r.case, r.phase, r.path, r.mode) == (case, phase, path, mode) and all(
            r.meta.get(k) == v for k, v in meta.items()
        ):
            return r.p50
    return None


def _headline(rows: list[Row], case: str, backend: str, layers: int) -> dict[str, object]:
    plan = _p50(rows, case, "plan", "cpkv", "host", backend=backend,
                variant="plan_layout_static validate=True (1 sync)") or 0.0  # fmt: skip
    ops = _p50(rows, case, "cpkv_ops", "cpkv", "eager", backend=backend) or 0.0
    ops_graph = _p50(rows, case, "cpkv_ops", "cpkv", "graph", backend=backend)
    layer = _p50(rows, case, "layer", "cpkv", "eager")
    replica = _p50(rows, case, "layer", "replica", "eager")
    attn = _p50(rows, case, "attention", "cpkv", "eager")
    host = _p50(rows, case, "cpkv_ops", "cpkv", "host", backend=backend)
    cost = ops + plan / layers
    out: dict[str, object] = {
        "backend": backend,
        "plan_us": plan,
        "cpkv_ops_us": ops,
        "cpkv_ops_graph_us": ops_graph,
        "host_us_per_layer": host,
        "layer_cpkv_us": layer,
        "layer_replica_us": replica,
        "share": cost / layer if layer else None,
        "share_vs_attention_only": cost / (cost + attn) if attn else None,
        "cpkv_layer_over_replica": layer / replica - 1 if layer and replica else None,
    }
    out["goals_met"] = {k: (out[k] is not None and out[k] <= v) for k, v in GOALS.items()}
    return out


def run_dry(args) -> tuple[list[Row], dict]:
    """CPU: imports and signatures of the real kernels; the benchmark's own code at toy sizes,
    with float32 torch stand-ins for the two CUDA kernels and the torch backend for cpkv."""
    import deepgemm_compat

    attention = load_sparse_mla()
    params = list(inspect.signature(attention).parameters)
    inp = build_inputs(DRY_CASE, DRY_DIMS, "cpu")
    rows, summary = measure_case(
        inp, ["torch"], Clock(cuda=False), mqa_logits_reference, sparse_mla_reference, True
    )
    summary.update(
        sparse_mla_prefill_params=params[:5],
        deepgemm_available=bool(deepgemm_compat.AVAILABLE),
        deepgemm_message="" if deepgemm_compat.AVAILABLE else deepgemm_compat.MISSING_MESSAGE,
        stand_ins="mqa_logits and sparse_mla_prefill run as float32 torch references (CPU)",
    )
    return rows, {DRY_CASE.name: summary}


def write_outputs(rows: list[Row], summaries: dict[str, dict], out: Path, env: dict) -> None:
    """The JSON record and the PNG (rewritten after every case: a cut-short run keeps its cases)."""
    out.mkdir(parents=True, exist_ok=True)
    record = [{**asdict(r), **env} for r in rows] + [
        {"case": c, "phase": "summary", "path": "-", "mode": "summary", "p50": None, "meta": s,
         **env}
        for c, s in summaries.items()
    ]  # fmt: skip
    benchkit.write_record(out / "shared-kv-layer.json", "shared-kv-layer", record)
    write_png(rows, summaries, out, env)


def read_record(path: Path) -> tuple[list[Row], dict[str, dict], dict]:
    """A record of this benchmark as rows, per-case summaries and the last row's environment."""
    records = benchkit.read_rows(path)
    if not records:
        raise SystemExit(f"--render: no rows in {path}; run the benchmark, or point --out at it")
    fields = Row.__dataclass_fields__
    rows = [Row(**{k: v for k, v in r.items() if k in fields}) for r in records
            if r["phase"] != "summary"]  # fmt: skip
    summaries = {r["case"]: r["meta"] for r in records if r["phase"] == "summary"}
    env = {k: v for k, v in records[-1].items() if k not in fields}
    return rows, summaries, env


def headline_table(summaries: dict[str, dict]) -> str:
    """Per case: the ``LayerStep`` path's share of the layer, its plan and per-layer costs, eager
    only (no CUDA-graph column: see the module docstring)."""

    def us(v: object) -> str:
        return "n/a" if not isinstance(v, float) else f"{v:.1f} us"

    def ms(v: object) -> str:
        return "n/a" if not isinstance(v, float) else f"{v / 1e3:.2f}"

    def pct(v: object) -> str:
        return "n/a" if not isinstance(v, float) else f"{100 * v:.2f}%"

    body = [
        [case, pct(s.get("share")), us(s.get("plan_us")),
         us(s.get("host_us_per_layer")), us(s.get("cpkv_ops_us")),
         f"{ms(s.get('layer_cpkv_us'))} / {ms(s.get('layer_replica_us'))} ms"]
        for case, s in summaries.items()
    ]  # fmt: skip
    head = [
        "case", f"LayerStep share of the layer (goal <= {100 * GOALS['share']:.0f}%)",
        f"plan, host with its sync (goal <= {GOALS['plan_us']:.0f} us)",
        f"LayerStep host per layer (goal <= {GOALS['host_us_per_layer']:.0f} us)",
        "LayerStep on the GPU, eager", "layer LayerStep / replica, eager",
    ]  # fmt: skip
    return benchkit.markdown_table(head, body, align="lrrrrr")


def sections(summaries: dict[str, dict], env: dict) -> dict[str, str]:
    """The page's one generated table, keyed by the device the record was measured on."""
    return {f"shared-kv-layer {benchkit.device_label(env)}": headline_table(summaries)}


def write_png(rows: list[Row], summaries: dict[str, dict], out: Path, env: dict) -> None:
    """The plot: each path's phases per case, eager (CUDA events; on --dry the CPU wall clock)."""

    def ms(case: str, phase: str, path: str, **meta: object) -> float:
        path = "both" if phase == "indexer" else path
        return (_p50(rows, case, phase, path, "eager", **meta) or 0) / 1e3

    stacks = {
        "cpkv": {
            p: [ms(c, p, "cpkv", backend=_b(s)) for c, s in summaries.items()]
            for p in ("cpkv_ops", "indexer", "attention")
        },
        "replica": {p: [ms(c, p, "replica") for c in summaries] for p in ("indexer", "attention")},
    }
    ylabel = "ms (CPU wall, toy sizes)" if env.get("dry") else "ms per layer (CUDA events, p50)"
    cases = list(summaries)
    label = {"cpkv": "LayerStep", "replica": "replica"}
    lines = [
        benchkit.Line(f"{label[path]}: {phase}", list(range(len(cases))), values)
        for path, phases in stacks.items()
        for phase, values in phases.items()
    ]
    for path, phases in stacks.items():  # the stack's top: the path's whole layer
        total = [sum(v) for v in zip(*phases.values(), strict=True)]
        lines.append(
            benchkit.Line(f"{label[path]}: sum", list(range(len(cases))), total, linestyle="--")
        )
    panel = benchkit.Panel(
        "one DSA layer, eager: cpkv_runtime's LayerStep vs a full replica", "case", ylabel,
        lines, xticks=cases,
    )  # fmt: skip
    benchkit.write_png(out / "shared-kv-layer.png", benchkit.Figure([panel]))


def print_report(rows: list[Row], summaries: dict[str, dict], out: Path, env: dict) -> None:
    """The table, the per-case summaries and, on a GPU, one headline line per case."""
    header = ["case", "phase", "path", "mode", "backend", "variant", "p50 us", "p20", "p80", "note"]
    body = []
    for r in rows:
        times = [f"{v:.1f}" if v is not None else "-" for v in (r.p50, r.p20, r.p80)]
        meta = [str(r.meta.get("backend", "")), str(r.meta.get("variant", ""))]
        body.append([r.case, r.phase, r.path, r.mode, *meta, *times, r.note])
    print(benchkit.text_table(header, body))
    for case, s in summaries.items():
        print(f"\n{case}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in s.items()))
    print(f"\nwrote {out / 'shared-kv-layer.json'} and {out / 'shared-kv-layer.png'}")
    for case, s in summaries.items():
        if s.get("share") is not None and not env.get("dry"):
            met = "met" if s["share"] <= GOALS["share"] else "NOT met"
            print(
                f"HEADLINE {case}: cpkv ops + plan/{Dims().layers} = {100 * s['share']:.2f}% of "
                f"the layer (goal <= {100 * GOALS['share']:.0f}%: {met}); plan "
                f"{_fmt(s['plan_us'])} us, host {_fmt(s['host_us_per_layer'])} us/layer"
            )


def _b(summary: dict) -> str:
    return str(summary.get("backend", "torch"))


def _fmt(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    args = parse_args(argv)
    if args.render:
        rows, summaries, env = read_record(args.out / "shared-kv-layer.json")
        write_png(rows, summaries, args.out, env)
        if args.md:
            benchkit.write_sections(args.md, sections(summaries, env))
        print(f"rendered {args.out / 'shared-kv-layer.png'}" + f" and {args.md}" * bool(args.md))
        return summaries
    command = shlex.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    env = {**capture_env(command), "dry": args.dry}
    if args.dry:
        rows, summaries = run_dry(args)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --dry for the CPU checks")
        import deepgemm_compat

        if not deepgemm_compat.AVAILABLE:
            raise SystemExit(f"the indexer needs sgl-deep-gemm: {deepgemm_compat.MISSING_MESSAGE}")
        env["kernels"] = register_kernels()
        dims = Dims(heads=args.heads)
        attention = load_sparse_mla()
        clock = Clock(cuda=True, budget_s=args.budget_s)
        rows, summaries = [], {}
        for case in args.cases:
            t0 = time.perf_counter()
            inp = build_inputs(CASES[case], dims, "cuda")
            case_rows, summary = measure_case(
                inp, args.backends, clock, deepgemm_compat.mqa_logits, attention,
                layer_graph=not args.no_layer_graph,
            )  # fmt: skip
            del inp
            torch.cuda.empty_cache()
            rows += case_rows
            summaries[case] = summary
            write_outputs(rows, summaries, args.out, env)
            print(f"done {case} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    write_outputs(rows, summaries, args.out, env)
    if args.md:
        benchkit.write_sections(args.md, sections(summaries, env))
    print_report(rows, summaries, args.out, env)
    return summaries


if __name__ == "__main__":
    main()
