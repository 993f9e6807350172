"""cpkv's shared-KV ops on one GPU, outside SGLang: the pool's plan and per-layer packs.

What runs, and what does not: ``plan_forward`` (the function ``CpkvSharedKVPool`` plans each
forward with: the ``shard_plan`` op, its one host read, the host's checks) and the pool's packs
(``shared_kv.pack_launcher``: the backend's bare ``materialize`` launcher, resolved once, as the
pool calls it) on a ``req_to_token`` the benchmark builds (``_skv_shapes.place``). Neither
SGLang's ``DeepseekSparseAttnBackend`` nor ``CpkvSharedKVPool`` is constructed, and no SGLang
code runs: the all-gather is a device copy of the same bytes (one GPU has no peers), SGLang's
stores (its fused quantise-and-store kernel) are ``index_copy_`` of raw rows, and SGLang's packs
are restated here as ``index_select`` of the send rows. The comparison through SGLang's backend,
against SGLang's own sharded pool, is ``bench_shared_kv_vs_upstream.py``.

Per case (B requests sharing a prefix, E new tokens each, one rank of CP 8, page 64, packed fp8
latent rows of 656 B and indexer pages of 8,448 B):

- ``plan``: host wall time of one forward's plan (``plan_forward`` from the ``req_to_token``:
  the ``shard_plan`` op, the one host read of 3 + N numbers, the checks, with the op resolved
  once as the pool does): the call (what the forward waits for; the GPU work it enqueues after
  its read runs on) and the call plus a wait for that work; on the torch reference ops, and
  ``cpkv_runtime.plan_layout`` (the definition, several host syncs, from the request pages),
  each until the GPU is done;
- ``plan-part``: each part of the plan alone (host enqueue, and device time with the host's
  launch gaps hidden behind a sleeping stream), and the same three parts timed inside one call
  (where the read also waits for the op's kernels);
- ``layer``: the per-layer step on this rank: the two packs of the owned pages (latent and
  indexer buffers), the device copy standing in for the all-gather, two ``index_copy_`` stores
  of the current rows at precomputed rows; eager (CUDA events) and host (enqueue cost per layer,
  no wait); and the host cost of each of those operations alone (``layer-op`` rows), to say
  where the host time goes. No CUDA-graph replay: SGLang runs prefill eager under KV sharding
  (``handle_kv_cache_sharding`` turns prefill CUDA graphs off);
- ``replicated``: one ``index_copy_`` store of the current rows, standing in for what SGLang's
  default CP path does to the pool per layer (every rank keeps every page, nothing to gather).

Prints one table and the headline (plan goal <= 100 us, host <= 30 us per layer), writes
``shared-kv-pool.json`` and ``shared-kv-pool.png`` under ``--out`` through benchkit, and with
``--md`` the tables of that page (``_pool_report``). Needs CUDA, except ``--render``, which
redraws the PNG and ``--md``'s tables from the ``--merge`` record without measuring. The rows
merge into ``--merge`` (default: the committed record) through benchkit: a row not measured again
is kept as recorded, with its own date and command, so ``--parts plan`` (the plan alone, about a
tenth of the run) keeps the per-layer rows of an earlier run.

    PYTHONPATH=$(printf '%s:' packages/*/src tools/benchkit/src) \\
        python3 packages/sglang-integration/benchmarks/bench_shared_kv_pool.py --out OUT
    uv run --frozen python packages/sglang-integration/benchmarks/bench_shared_kv_pool.py \\
        --render --md docs/benchmarks/shared-kv-pool.md
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "packages" / "sglang-integration" / "tests"))

import _pool_report as report  # noqa: E402
import benchkit  # noqa: E402
import cpkv_runtime as cr  # noqa: E402
from _layer_io import (  # noqa: E402
    Row,
    Times,
    capture_env,
    cuda_event_times,
    wall_times,
)
from _skv_shapes import P, Req, place  # noqa: E402
from sglang_cpkv.plugin.shared_kv import (  # noqa: E402
    ScratchGeometry,
    draft_forward,
    finish_forward,
    pack_launcher,
    plan_forward,
    shard_ops,
)

GOALS, PACKS, CASES = report.GOALS, report.PACKS, report.CASES
PARTS = {"plan": ("plan", "plan-part"), "layer": ("layer", "layer-op")}
#: what names one measurement of this benchmark (benchkit.merge_rows adds the device)
KEY = ("case", "phase", "path", "mode", "meta")
N, RANK = 8, 3
LATENT, INDEX = 656, 8448


def _setup(requests: int, prefix: int, extend: int):
    batch = place("bench", [Req("A", prefix, extend) for _ in range(requests)], N)
    local_pages = batch.local_pages + 1
    geo = ScratchGeometry(
        P, N, RANK, N * requests * (prefix // P + 1), requests * (extend // P + 2)
    )
    r2t = batch.req_to_token().cuda()
    idx = torch.arange(requests, device="cuda")
    args = (r2t, idx, batch.prefix, batch.seq, batch.out_cache_loc().cuda(), geo,
            N * local_pages)  # fmt: skip
    return batch, geo, args, local_pages


def device_times(fn, reps: int = 20) -> list[float]:
    """GPU time of ``fn``'s work alone, in us: the stream sleeps while the host enqueues it, so
    the events around it time the kernels back to back, without the host's launch gaps."""
    fn()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)  # about 1 ms of GPU clock: longer than the enqueue
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return samples


def plan_parts(name: str, args: tuple, ops) -> list[Row]:
    """Where the plan's time goes: the op's host enqueue and device time, the read, the rest."""
    draft = draft_forward(*args[:2], args[2], batch_extend(args), *args[4:], ops=ops)
    numbers = draft.outputs[0].tolist()
    geo = args[5]

    def plan_op():
        return draft_forward(*args[:2], args[2], batch_extend(args), *args[4:], ops=ops)

    parts = [("shard_plan (draft_forward)", plan_op, True),
             ("host read (.tolist)", lambda: draft.outputs[0].tolist(), False),
             ("checks after the read (finish_forward)",
              lambda: finish_forward(draft, numbers, geo), False)]  # fmt: skip
    rows = []
    for what, fn, on_device in parts:
        host = wall_times(fn, sync=False, reps=50, warmup=20)
        rows.append(Row.timed(name, "plan-part", "cpkv", "host", host, variant=what))
        if on_device:
            rows.append(Row.timed(name, "plan-part", "cpkv", "device",
                                  Times.of(device_times(fn)), variant=what))  # fmt: skip
    return rows


def call_phases(name: str, args: tuple, ops, reps: int = 50, warmup: int = 20) -> list[Row]:
    """The plan's three parts timed inside one ``plan_forward``-shaped call, in us: alone, the
    read finds the kernels done; here it waits for them, as the forward does."""
    geo, extend = args[5], batch_extend(args)
    names = ("in one call: shard_plan", "in one call: read", "in one call: checks")
    samples: dict[str, list[float]] = {n: [] for n in names}
    for i in range(warmup + reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        draft = draft_forward(*args[:2], args[2], extend, *args[4:], ops=ops)
        t1 = time.perf_counter()
        numbers = draft.outputs[0].tolist()
        t2 = time.perf_counter()
        finish_forward(draft, numbers, geo)
        t3 = time.perf_counter()
        if i >= warmup:
            for n, dt in zip(names, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                samples[n].append(dt * 1e6)
    return [Row.timed(name, "plan-part", "cpkv", "host", Times.of(samples[n]), variant=n)
            for n in names]  # fmt: skip


def batch_extend(args: tuple) -> list[int]:
    return [s - q for s, q in zip(args[3], args[2], strict=True)]


def busy_gpu(seconds: float = 0.3) -> None:
    """Keep the GPU busy a moment before host-bound timing: an idle card runs its clocks low,
    and a loop of small launches with a sync each does not raise them (the first case of a run
    timed 1.5x slower than the same case timed after the torch reference had run)."""
    a = torch.randn(4096, 4096, device="cuda")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a
        torch.cuda.synchronize()


def bench_case(
    name: str, shape: tuple[int, int, int], backends: list[str], parts: tuple[str, ...]
) -> list[Row]:
    batch, geo, args, local_pages = _setup(*shape)
    busy_gpu()

    pages = torch.tensor([[*p, *[-1] * (max(map(len, batch.pages)) - len(p))]
                          for p in batch.pages], dtype=torch.int32, device="cuda")  # fmt: skip
    cuda_ops, torch_ops = shard_ops(pages.device), shard_ops(pages.device, "torch")

    def plan_layout():
        return cr.plan_layout(pages, batch.prefix, batch.extend, P, args[6])

    def pool_plan():
        return plan_forward(*args, ops=cuda_ops)

    rows = [] if "plan" not in parts else [
        Row.timed(name, "plan", "cpkv", "host",
                  wall_times(pool_plan, reps=50, sync=False, warmup=20),
                  variant="plan_forward (pool, 1 host read)"),
        Row.timed(name, "plan", "cpkv", "host",
                  wall_times(pool_plan, reps=50, warmup=20),
                  variant="plan_forward until its GPU work is done"),
        Row.timed(name, "plan", "cpkv", "host",
                  wall_times(lambda: plan_forward(*args, ops=torch_ops)),
                  variant="plan_forward on the torch reference ops"),
        Row.timed(name, "plan", "cpkv", "host", wall_times(plan_layout),
                  variant="plan_layout (definition)"),
    ]  # fmt: skip
    if "plan" in parts:
        rows += plan_parts(name, args, cuda_ops) + call_phases(name, args, cuda_ops)
    if "layer" not in parts:
        return rows
    plan = plan_forward(*args, ops=cuda_ops)
    block = plan.placement.block
    pool = torch.randint(0, 256, (local_pages, P, LATENT), dtype=torch.uint8, device="cuda")
    index_pool = torch.randint(0, 256, (local_pages, INDEX), dtype=torch.uint8, device="cuda")
    scratch = torch.zeros(geo.trash_page + 1, P, LATENT, dtype=torch.uint8, device="cuda")
    index_scratch = torch.zeros(geo.trash_page + 1, INDEX, dtype=torch.uint8, device="cuda")
    peers = torch.randint(0, 256, (N * block, P, LATENT), dtype=torch.uint8, device="cuda")
    current = torch.randint(0, 256, (batch.num_tokens, LATENT), dtype=torch.uint8, device="cuda")
    local = pool.view(-1, LATENT)

    def layer(backend: str):
        # as CpkvSharedKVPool packs: the backend's bare launcher, resolved once
        pack = pack_launcher(pool.device, backend)
        send_pages = plan.placement.send_pages
        send = scratch[RANK * block : (RANK + 1) * block]
        index_send = index_scratch[RANK * block : (RANK + 1) * block]

        def step():
            scratch[: N * block].copy_(peers)  # stands in for the all-gather (one GPU)
            pack(pool, send_pages, send)
            pack(index_pool, send_pages, index_send)
            scratch.view(-1, LATENT).index_copy_(0, plan.cur_rows, current)
            local.index_copy_(0, plan.local_rows, current)

        return step

    def replicated():
        local.index_copy_(0, plan.local_rows, current)

    # Each operation of the step alone, host enqueue cost (where the step's host time goes).
    pack = pack_launcher(pool.device)
    send = scratch[RANK * block : (RANK + 1) * block]
    index_send = index_scratch[RANK * block : (RANK + 1) * block]
    send_rows = (plan.placement.send_pages.long().unsqueeze(1) * P + torch.arange(P, device="cuda")
                 ).view(-1)  # fmt: skip
    send_index = plan.placement.send_pages.long()
    latent_rows, send_latent = pool.view(-1, LATENT), send.view(-1, LATENT)

    def packs():
        pack(pool, plan.placement.send_pages, send)
        pack(index_pool, plan.placement.send_pages, index_send)

    def upstream_packs():  # SGLang's sharded pool: index_select of the send rows, per buffer
        torch.index_select(latent_rows, 0, send_rows, out=send_latent)
        torch.index_select(index_pool, 0, send_index, out=index_send)

    ops_alone = {
        PACKS: packs,
        report.UPSTREAM_PACKS: upstream_packs,
        "copy (all-gather stand-in)": lambda: scratch[: N * block].copy_(peers),
        "pack latent": lambda: pack(pool, plan.placement.send_pages, send),
        "pack index": lambda: pack(index_pool, plan.placement.send_pages, index_send),
        "store to scratch": lambda: scratch.view(-1, LATENT).index_copy_(0, plan.cur_rows, current),
        "store to pool": lambda: local.index_copy_(0, plan.local_rows, current),
    }
    for what, fn in ops_alone.items():
        host = wall_times(fn, sync=False, reps=50, warmup=20)
        rows.append(Row.timed(name, "layer-op", "cpkv", "host", host, variant=what))

    moved = 2 * (N * block * P * LATENT + block * INDEX) + 4 * batch.num_tokens * LATENT
    for provider, fn in [*((b, layer(b)) for b in backends), ("replicated", replicated)]:
        path = "replica" if provider == "replicated" else "cpkv"
        meta = {"backend": provider, "block": block, "tokens": batch.num_tokens,
                "bytes_moved": moved if path == "cpkv" else 0}  # fmt: skip
        rows.append(Row.timed(name, "layer", path, "eager", cuda_event_times(fn), **meta))
        rows.append(Row.timed(name, "layer", path, "host", wall_times(fn, sync=False), **meta))
    return rows


def recorded_rows(path: Path, parts: tuple[str, ...]) -> list[dict]:
    """The rows recorded at ``path`` without their summaries (recomputed from the merge); with
    only some parts timed, they must hold the others."""
    recorded = [rec for rec in benchkit.read_rows(path) if rec.get("phase") != "summary"]
    missing = [p for p in PARTS if p not in parts
               and not any(rec.get("phase") in PARTS[p] for rec in recorded)]  # fmt: skip
    if missing:
        sys.exit(f"--parts {' '.join(parts)}: {path} holds no {' or '.join(missing)} rows to "
                 f"keep; time every part, or --merge a record that has them")  # fmt: skip
    return recorded


def row_of(rec: dict) -> Row:
    return Row(**{k: v for k, v in rec.items() if k in Row.__dataclass_fields__})


def _p50(rows: list[Row], case: str, phase: str, mode: str, **meta: object) -> float | None:
    for r in rows:
        if (r.case, r.phase, r.mode) == (case, phase, mode) and all(
            r.meta.get(k) == v for k, v in meta.items()
        ):
            return r.p50
    return None


def summaries(rows: list[Row], backend: str) -> dict[str, dict[str, object]]:
    """Per case: the pool's plan and the per-layer host cost on ``backend``, against the goals."""
    out = {}
    for case in dict.fromkeys(r.case for r in rows):
        plan = _p50(rows, case, "plan", "host", variant=report.PLAN)
        host = _p50(rows, case, "layer-op", "host", variant=PACKS)
        step = _p50(rows, case, "layer", "host", backend=backend)
        out[case] = {
            "backend": backend, "plan_us": plan, "host_us_per_layer": host,
            "step_host_us": step,
            "goals_met": {"plan_us": plan is not None and plan <= GOALS["plan_us"],
                          "host_us_per_layer": host is not None
                          and host <= GOALS["host_us_per_layer"]},
        }  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument(
        "--parts",
        nargs="+",
        default=list(PARTS),
        choices=list(PARTS),
        help="what to time: the per-forward plan, the per-layer step (default both)",
    )
    ap.add_argument("--merge", type=Path, default=ROOT / "docs/benchmarks/shared-kv-pool.json",
                    help="JSON whose rows not measured again are kept (default: the committed "
                         "record)")  # fmt: skip
    ap.add_argument("--md", type=Path, help="page whose generated tables are rewritten")
    ap.add_argument("--render", action="store_true",
                    help="redraw the PNG under --out and --md's tables from --merge's rows, "
                         "measuring nothing (no GPU needed)")  # fmt: skip
    a = ap.parse_args()
    if a.render:
        recorded = benchkit.read_rows(a.merge)
        if not recorded:
            sys.exit(f"--render: no rows in {a.merge}; run the benchmark, or --merge its JSON")
        publish(recorded, a.out, a.md, write_json=False)
        return
    if not torch.cuda.is_available():
        sys.exit("bench_shared_kv_pool needs a CUDA device (the layer path is timed on the GPU); "
                 "--render redraws the record without one")  # fmt: skip
    found = cr.available_backends()
    backends = [b for b in ("torch", "triton", "cuda") if b in found and found[b].available]
    parts = tuple(a.parts)
    recorded = recorded_rows(a.merge, parts)
    new_rows: list[Row] = []
    for name in a.cases:
        new_rows += bench_case(name, CASES[name], backends, parts)
        print(f"done {name}", flush=True)
    env = capture_env("python3 " + " ".join(sys.argv)) | {"cp": N, "rank": RANK}
    merged = benchkit.merge_rows(recorded, [{**asdict(r), **env} for r in new_rows], KEY)
    here = benchkit.device_label(env)  # the table, summary and plot: this device's rows
    rows = [row_of(rec) for rec in merged if benchkit.device_label(rec) == here]
    best = backends[-1]
    summary = summaries(rows, best)
    header = ["case", "phase", "path", "mode", "backend / variant", "p50 us", "p20", "p80"]
    body = [
        [r.case, r.phase, r.path, r.mode, str(r.meta.get("backend") or r.meta.get("variant")),
         *(f"{v:.1f}" for v in (r.p50, r.p20, r.p80))]
        for r in rows
    ]  # fmt: skip
    print(benchkit.text_table(header, body))
    for case, s in summary.items():
        met = ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in s["goals_met"].items())
        print(f"HEADLINE {case}: plan_forward {s['plan_us']:.1f} us (goal <= "
              f"{GOALS['plan_us']:.0f}), cpkv ops {s['host_us_per_layer']:.1f} us/layer host "
              f"(goal <= {GOALS['host_us_per_layer']:.0f}; the whole step with index_copy_ "
              f"stores and the gather's device-copy stand-in {s['step_host_us']:.1f} us on "
              f"{best}): {met}")  # fmt: skip
    record = merged + [
        {"case": c, "phase": "summary", "path": "-", "mode": "summary", "meta": s, **env}
        for c, s in summary.items()
    ]
    publish(record, a.out, a.md, write_json=True)


def publish(record: list[dict], out: Path, md: Path | None, *, write_json: bool) -> None:
    """Write the record (unless ``write_json`` is off), its PNG and ``md``'s tables."""
    out.mkdir(parents=True, exist_ok=True)
    wrote = []
    if write_json:
        wrote.append(out / f"{report.NAME}.json")
        benchkit.write_record(wrote[-1], report.NAME, record)
    wrote.append(out / f"{report.NAME}.png")
    benchkit.write_png(wrote[-1], report.figure(record))
    if md is not None:
        benchkit.write_sections(md, report.sections(record))
        wrote.append(md)
    print("wrote " + ", ".join(map(str, wrote)))


if __name__ == "__main__":
    main()
