"""The shared-KV pool's per-forward plan and per-layer step on one GPU, beside the replicated path.

Per case (B requests sharing a prefix, E new tokens each, one rank of CP 8, page 64, packed fp8
latent rows of 656 B and indexer pages of 8,448 B):

- ``plan``: host wall time of one forward's plan (``plan_forward``: ``cpkv_runtime.plan_layout``,
  slot placement with its one host sync, the current-token rows) and of its parts;
- ``layer``: one layer of ``CpkvSharedKVPool`` on this rank: pack the owned pages
  (``cpkv_runtime.gather_pages``, per backend) for the latent and indexer buffers, the peers'
  blocks (one device copy standing in for the all-gather), two stores of the current rows at
  precomputed rows; eager (device time, L2 flushed), host (enqueue cost per layer) and
  CUDA-graph replay;
- ``replicated``: what SGLang's default CP path does to the pool per layer: one store of the
  current rows (every rank keeps every page, nothing to gather).

Prints one table, writes ``shared-kv-pool.json`` and ``shared-kv-pool.png`` under ``--out``.

    python3 packages/sglang-integration/benchmarks/bench_shared_kv_pool.py --out docs/benchmarks
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "packages" / "cpkv-kernels" / "benchmarks"))
sys.path.insert(0, str(ROOT / "packages" / "sglang-integration" / "tests"))

import cpkv_runtime as cr  # noqa: E402
from _harness import Row, env_info, time_eager, time_graph, time_host, write_json  # noqa: E402
from _skv_shapes import P, Req, place  # noqa: E402
from sglang_cpkv.shared_kv import (  # noqa: E402
    ScratchGeometry,
    place_slots,
    plan_forward,
    request_pages,
)

N, RANK = 8, 3
LATENT, INDEX = 656, 8448
CASES = {"8x65536+2048": (8, 65536, 2048), "8x16384+2048": (8, 16384, 2048),
         "4x32768+4096": (4, 32768, 4096), "1x65536+2048": (1, 65536, 2048)}  # fmt: skip


def _setup(requests: int, prefix: int, extend: int):
    batch = place("bench", [Req("A", prefix, extend) for _ in range(requests)], N)
    local_pages = batch.local_pages + 1
    geo = ScratchGeometry(
        P, N, RANK, N * requests * (prefix // P + 1), requests * (extend // P + 2)
    )
    r2t = batch.req_to_token().cuda()
    idx = torch.arange(requests, device="cuda")
    args = (request_pages(r2t, idx, batch.seq, P), batch.prefix, batch.seq,
            batch.out_cache_loc().cuda(), geo, N * local_pages)  # fmt: skip
    return batch, geo, args, local_pages


def _wall_us(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def bench_case(name: str, shape: tuple[int, int, int], backends: list[str]) -> list[Row]:
    batch, geo, args, local_pages = _setup(*shape)
    extend = [s - p for s, p in zip(args[2], args[1], strict=True)]

    def plan_layout():
        return cr.plan_layout(args[0], args[1], extend, P, args[5])

    layout = plan_layout()
    rows = [
        Row(
            "plan", name, "plan_forward", "host", _wall_us(lambda: plan_forward(*args)), None, None
        ),
        Row("plan", name, "plan_layout", "host", _wall_us(plan_layout), None, None),
    ]
    rows.append(Row("plan", name, "place_slots", "host",
                    _wall_us(lambda: place_slots(layout, args[1], geo)), None, None))  # fmt: skip
    plan = plan_forward(*args)
    block = plan.placement.block
    pool = torch.randint(0, 256, (local_pages, P, LATENT), dtype=torch.uint8, device="cuda")
    index_pool = torch.randint(0, 256, (local_pages, INDEX), dtype=torch.uint8, device="cuda")
    scratch = torch.zeros(geo.trash_page + 1, P, LATENT, dtype=torch.uint8, device="cuda")
    index_scratch = torch.zeros(geo.trash_page + 1, INDEX, dtype=torch.uint8, device="cuda")
    peers = torch.randint(0, 256, (N * block, P, LATENT), dtype=torch.uint8, device="cuda")
    current = torch.randint(0, 256, (batch.num_tokens, LATENT), dtype=torch.uint8, device="cuda")
    local = pool.view(-1, LATENT)

    def layer(backend: str):
        def step():
            scratch[: N * block].copy_(peers)  # stands in for the all-gather (one GPU)
            cr.gather_pages(pool, plan.placement.send_pages,
                            out=scratch[RANK * block : (RANK + 1) * block], backend=backend,
                            validate=False)  # fmt: skip
            cr.gather_pages(index_pool, plan.placement.send_pages,
                            out=index_scratch[RANK * block : (RANK + 1) * block],
                            backend=backend, validate=False)  # fmt: skip
            scratch.view(-1, LATENT).index_copy_(0, plan.cur_rows, current)
            local.index_copy_(0, plan.local_rows, current)

        return step

    def replicated():
        local.index_copy_(0, plan.local_rows, current)

    moved = 2 * (N * block * P * LATENT + block * INDEX) + 4 * batch.num_tokens * LATENT
    for provider, fn in [*((b, layer(b)) for b in backends), ("replicated", replicated)]:
        for mode, timer in (("eager", time_eager), ("host", time_host), ("graph", time_graph)):
            p50, p20, p80 = timer(fn)
            rows.append(Row("layer", name, provider, mode, p50, p20, p80,
                            bytes_moved=moved if provider != "replicated" else 0,
                            meta={"block": block, "tokens": batch.num_tokens}))  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    a = ap.parse_args()
    found = cr.available_backends()
    backends = [b for b in ("torch", "triton", "cuda") if b in found and found[b].available]
    rows: list[Row] = []
    for name in a.cases:
        rows += bench_case(name, CASES[name], backends)
    print(f"{'op':6} {'case':14} {'provider':13} {'mode':6} {'p50 us':>10}")
    for r in rows:
        print(f"{r.op:6} {r.case:14} {r.provider:13} {r.mode:6} {r.p50:10.1f}")
    a.out.mkdir(parents=True, exist_ok=True)
    command = "python3 " + " ".join(sys.argv)
    write_json(a.out / "shared-kv-pool.json", env_info(command), rows, {"cp": N, "rank": RANK})
    try:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        for provider in sorted({r.provider for r in rows if r.op == "layer"}):
            pts = [
                r for r in rows if r.op == "layer" and r.provider == provider and r.mode == "graph"
            ]
            ax.plot([r.case for r in pts], [r.p50 for r in pts], marker="o", label=provider)
        ax.set_ylabel("us per layer (graph replay)")
        ax.set_title("shared-KV per-layer step vs replicated store, one CP-8 rank")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.out / "shared-kv-pool.png")
    except ImportError:
        print("matplotlib not installed: no PNG", file=sys.stderr)


if __name__ == "__main__":
    main()
