"""CP scaling of one DSA layer per phase and rank, in ``RankLayer``: a model, not the pool.

``RankLayer`` (``_cp_rank_layer``) is a per-rank model of the shared-KV layer written for this
benchmark: it takes the pool's placement (``plan_forward``) but neither ``CpkvSharedKVPool`` nor
SGLang's ``DeepseekSparseAttnBackend`` runs (its differences from the pool: that module's
docstring). The pool through SGLang's backend is ``bench_shared_kv_vs_upstream.py``.

One process per rank (``--world N``: N GPUs under NCCL, cp = N; ``--world 1`` is the one-GPU
baseline). Each rank runs its share of one layer (``_cp_rank_layer``): the per-layer **gather**
of the history pages it owns plus the current KV its tokens computed, the **cpkv ops**, the
**indexer** (DeepGEMM fp8 ``mqa_logits`` + top-k) and the **attention** (SGLang's Triton
``sparse_mla_prefill`` over the gathered scratch), each timed alone with CUDA events, and the
whole **layer** with every gather kicked one layer ahead on a side stream. A phase's time is the
slowest rank's p50. Cases (``T`` = new tokens of the batch: 32K, 64K, 128K): one request
prefilled whole (``1xT``), and 8 requests sharing a 64K prefix, each adding ``T / 8``.

Every run merges its rows into ``<out>/cp-layer-scaling.json`` (per device, keyed by case, phase
and cp) and, from all rows there, prints the parallel efficiency ``t_cp1 / (cp * t_cp)`` per
phase and draws ``cp-layer-scaling.png``. Runs at cp 1, 2 and 4 into one ``--out`` (or
``--merge`` of their JSONs) give the scaling table. Each case also checks that the rows the top-k
reads through the scratch equal the full pool's, and the attention over the scratch equals the
attention over the pool, bitwise (``parity`` in the rows).

    python3 packages/sglang-integration/benchmarks/bench_cp_layer_scaling.py --world 1 --out DIR
    python3 packages/sglang-integration/benchmarks/bench_cp_layer_scaling.py --world 4 --out DIR
    python3 packages/sglang-integration/benchmarks/bench_cp_layer_scaling.py --merge A B --out DIR
    python3 packages/sglang-integration/benchmarks/bench_cp_layer_scaling.py --dry --out DIR

``--dry`` (CPU, gloo): toy sizes; DeepGEMM's ``mqa_logits`` and SGLang's ``sparse_mla_prefill``
replaced by the float32 torch stand-ins of ``_layer_cases``; the cpkv ops on the torch backend.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import socket
import sys
import time
from pathlib import Path

import benchkit
import torch
import torch.distributed as dist
from _cp_rank_layer import RankLayer
from _cp_scaling_report import KEY, REPORT, table
from _layer_cases import (
    DRY_DIMS,
    Dims,
    LayerCase,
    build_inputs,
    load_sparse_mla,
    mqa_logits_reference,
    sparse_mla_reference,
)

K = 1024
CASES = {
    c.name: c
    for t in (32 * K, 64 * K, 128 * K)
    for c in (
        LayerCase(f"1x{t // K}K", 1, 0, t),
        LayerCase(f"8x(64K+{t // 8 // K}K)", 8, 64 * K, t // 8),
    )
}
DRY_CASES = {
    c.name: c for c in (LayerCase("dry 1x96", 1, 0, 96), LayerCase("dry 3x(128+40)", 3, 128, 40))
}
#: NVLink multicast off, for NCCL, torch's symmetric memory and NVSHMEM
NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the JSON and PNG")
    ap.add_argument("--world", type=int, help="ranks = CP size (default: the CUDA devices; dry 2)")
    ap.add_argument("--cases", nargs="+", help=f"default: all of {', '.join(CASES)}")
    ap.add_argument("--backend", default=None, help="cpkv op backend (default: best available)")
    ap.add_argument(
        "--reps", type=int, default=10, help="timed calls per phase (same on all ranks)"
    )
    ap.add_argument("--layers", type=int, default=4, help="layers back to back in the layer row")
    ap.add_argument("--heads", type=int, default=64, help="attention heads per rank (GLM-5.1: 64)")
    ap.add_argument("--merge", nargs="+", type=Path, help="records to combine; nothing is measured")
    ap.add_argument("--dry", action="store_true", help="CPU under gloo: toy sizes, stand-ins")
    args = ap.parse_args(argv)
    known = DRY_CASES if args.dry else CASES
    args.cases = args.cases or list(known)
    for c in args.cases:
        if c not in known:
            ap.error(
                f"--cases {c!r} is not a case{' of --dry' * args.dry}; pick from {list(known)}"
            )
    if args.merge:
        return args
    if args.world is None:
        args.world = 2 if args.dry else torch.cuda.device_count()
    if args.world < 1:
        ap.error("no CUDA device: run with --dry for the CPU check, or on a GPU machine")
    if not args.dry and torch.cuda.device_count() < args.world:
        ap.error(f"--world {args.world} needs {args.world} CUDA devices, found "
                 f"{torch.cuda.device_count()}; lower --world")  # fmt: skip
    return args


def _kernels(dry: bool):
    """(mqa_logits, sparse_mla_prefill): the real kernels, or the CPU stand-ins under --dry."""
    if dry:
        return mqa_logits_reference, sparse_mla_reference
    import deepgemm_compat

    if not deepgemm_compat.AVAILABLE:
        raise SystemExit(f"the indexer needs sgl-deep-gemm: {deepgemm_compat.MISSING_MESSAGE}")
    return deepgemm_compat.mqa_logits, load_sparse_mla()


def _times(fn, cuda: bool, reps: int) -> list[float]:
    """Seconds per call; a fixed count on every rank (the collectives must pair up)."""
    if cuda:
        return benchkit.cuda_event_times(fn, reps=reps, warmup=2)
    return benchkit.wall_times(fn, reps=reps, warmup=1)


def measure_case(case: LayerCase, args, rank: int, device: torch.device) -> list[dict]:
    """This rank's rows of one case: one per phase (us), parity and sizes in each."""
    cp, cuda = args.world, device.type == "cuda"
    dims = DRY_DIMS if args.dry else Dims(heads=args.heads)
    inp = build_inputs(case, dims, "cuda" if cuda else "cpu")
    mqa_logits, attention = _kernels(args.dry)
    backend = args.backend or ("torch" if args.dry else None)
    layer = RankLayer(inp, cp, rank, dist.group.WORLD, mqa_logits, attention, backend)
    parity = layer.parity()
    phases = {
        "gather": layer.gather,
        "cpkv_ops": layer.cpkv_ops,
        "indexer": layer.indexer,
        "attention": layer.attend,
    }
    rows = []
    for phase, fn in phases.items():
        dist.barrier()
        rows.append((phase, _times(fn, cuda, args.reps), 1))
    dist.barrier()
    layers = functools.partial(layer.forward, args.layers)
    rows.append(("layer", _times(layers, cuda, args.reps), args.layers))
    pl = layer.plan.placement
    meta = {
        "bsz": case.bsz, "prefix": case.prefix, "new": case.new, "tokens_per_rank": layer.num_mine,
        "gathered_pages": pl.num_gathered, "block_pages": pl.block, **parity,
    }  # fmt: skip
    out = []
    for phase, samples, per in rows:
        q = benchkit.quantiles([s / per for s in samples]).to("us")
        out.append({"phase": phase, **q, **meta})
    del layer, inp
    if cuda:
        torch.cuda.empty_cache()
    return out


def rank_main(rank: int, args, port: int) -> None:
    device = torch.device("cpu")
    if not args.dry:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(
        "gloo" if args.dry else "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
        world_size=args.world, timeout=datetime.timedelta(seconds=900),
        **({} if args.dry else {"device_id": device}),
    )  # fmt: skip
    try:
        if not args.dry:
            from bench_shared_kv_layer import register_kernels

            kernels = register_kernels()
        env = benchkit.capture_env(device=str(device), package="sglang-integration")
        env |= {"dry": args.dry, "world": args.world, **({} if args.dry else {"kernels": kernels})}
        rows = []
        for name in args.cases:
            t0 = time.perf_counter()
            mine = measure_case((DRY_CASES if args.dry else CASES)[name], args, rank, device)
            every = [None] * args.world
            dist.all_gather_object(every, mine)
            if rank == 0:
                rows += _combine(name, every, args.world, env)
                print(f"done {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
                publish(rows, args.out)  # after every case: a cut-short run keeps its cases
    finally:
        dist.destroy_process_group()


def _combine(case: str, every: list[list[dict]], cp: int, env: dict) -> list[dict]:
    """One row per phase: the slowest rank's p50 (the phase ends when it does), every rank's."""
    out = []
    for by_rank in zip(*every, strict=True):
        slowest = max(by_rank, key=lambda r: r["p50"])
        out.append({
            "op": "cp_layer", "case": case, "provider": "cpkv", "cp": cp, **slowest,
            "p50_ranks": [r["p50"] for r in by_rank],
            "parity": all(r["rows_equal_replica"] and r["attention_equals_replica"]
                          for r in by_rank),
            **env,
        })  # fmt: skip
    return out


def publish(rows: list[dict], out: Path) -> list[dict]:
    every = REPORT.publish(rows, out)
    print(table(every))
    print(f"wrote {REPORT.json_path(out)} and {out / (REPORT.name + '.png')}")
    return every


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.merge:
        rows: list[dict] = []
        for path in args.merge:
            rows = benchkit.merge_rows(rows, benchkit.read_rows(path), KEY)
        publish(rows, args.out)
        return
    if not args.dry:
        for var, value in NVLS_OFF.items():
            os.environ.setdefault(var, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if args.world == 1:
        rank_main(0, args, port)
        return
    import torch.multiprocessing as mp

    mp.start_processes(rank_main, args=(args, port), nprocs=args.world, start_method="spawn")


if __name__ == "__main__":
    main()
