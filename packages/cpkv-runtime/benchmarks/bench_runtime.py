"""Benchmark the cpkv_runtime ops (the torch definition and any registered backend) side by side.

Production shapes: B in {1, 8, 32}, 8K-128K tokens per request, P = 64, rows of 1152 (bf16 576
latent), 656 (fp8 + scales) and 132 (indexer) bytes; plus the dedup saving for 8 requests on one
64K-token prefix. Ops are timed at the backend-contract level (same tensors for every provider);
``plan_layout`` is timed through the public API. CUDA: torch.cuda.Event per repetition; CPU:
time.perf_counter. Reports p50 with p20/p80, the ratio to torch, and effective bandwidth against a
measured device copy.

    PYTHONPATH=packages/cpkv-runtime/src:packages/cpkv-cli/src \
        python3 packages/cpkv-runtime/benchmarks/bench_runtime.py \
        --device cuda --out docs/benchmarks

Merges its rows into ``<out>/cpkv-runtime.json``: the rows of ``--merge`` (default: that JSON)
are kept unless this run measured them again (same device, op, case, provider and row width).
Draws ``<out>/cpkv-runtime.png`` (skipped with a note when matplotlib is missing) and, with
``--md``, rewrites that record's generated tables. ``--render`` does the writing alone, from the
JSON, without measuring.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial

import benchkit
import cpkv_runtime as cr
import torch
from _report import REPORT, print_table

P = 64
WIDTHS = {1152: (torch.bfloat16, 576), 656: (torch.uint8, 656), 132: (torch.uint8, 132)}
K, M = 1024, 1024 * 1024


def measure(fn: Callable[[], object], device: torch.device, reps: int) -> dict[str, object]:
    """p50/p20/p80 in us of ``reps`` calls after two warm-up calls: CUDA events per call on a
    GPU, the wall clock on CPU."""
    if device.type == "cuda":
        samples = benchkit.cuda_event_times(fn, reps=reps, warmup=2)
    else:
        samples = benchkit.wall_times(fn, reps=reps, warmup=2)
    return benchkit.quantiles(samples).to("us")


def copy_bandwidth(device: torch.device, nbytes: int, reps: int) -> float:
    """Measured device-to-device copy bandwidth in bytes/s (read + write counted)."""
    src = torch.empty(nbytes // 8, dtype=torch.int64, device=device).random_()
    dst = torch.empty_like(src)
    p50 = measure(lambda: dst.copy_(src), device, reps)["p50"]
    return 2 * nbytes / (p50 * 1e-6)


def make_batch(bsz: int, tokens: int, extend: int, device: torch.device, g: torch.Generator):
    """B requests of ``tokens`` each (``extend`` current), pages scattered over the pool."""
    per_req = -(-tokens // P)
    num_pages = bsz * per_req + 16
    pages = torch.randperm(num_pages, generator=g)[: bsz * per_req].view(bsz, per_req)
    prefix = torch.full((bsz,), tokens - extend)
    return (
        pages.int().to(device),
        prefix.to(device),
        torch.full((bsz,), extend, device=device),
        num_pages,
    )


def shared_prefix_batch(bsz: int, prefix_tokens: int, extend: int, device: torch.device):
    """B requests on one shared prefix, each extending on private pages."""
    shared, own = prefix_tokens // P, -(-extend // P)
    rows = [list(range(shared)) + [shared + b * own + j for j in range(own)] for b in range(bsz)]
    pages = torch.tensor(rows, dtype=torch.int32, device=device)
    prefix = torch.full((bsz,), prefix_tokens, device=device)
    return pages, prefix, torch.full((bsz,), extend, device=device), shared + bsz * own


def providers_for(op: str, device: torch.device, wanted: list[str]) -> dict[str, Callable]:
    found = cr.available_backends()
    return {n: found[n].ops[op] for n in wanted if n in found and found[n].supports(op, device)}


def rand_rows(shape: tuple[int, ...], width: int, device: torch.device) -> torch.Tensor:
    """Random bytes made on the device (GBs of rows), viewed as the row dtype."""
    dtype, elems = WIDTHS[width]
    raw = torch.empty((*shape, width), dtype=torch.uint8, device=device).random_()
    return raw.view(dtype).reshape(*shape, elems)


class Recorder:
    """Times each provider's callable and appends one row per provider."""

    def __init__(self, args, device: torch.device, copy_bw: float, rows: list[dict]) -> None:
        self.args, self.device, self.copy_bw, self.rows = args, device, copy_bw, rows

    def __call__(self, op: str, case: dict, fns: dict[str, Callable], moved: int, **extra) -> None:
        for provider, fn in fns.items():
            q = measure(fn, self.device, self.args.reps)
            rate = moved / (q["p50"] * 1e-6) if moved else None
            self.rows.append(
                {
                    "op": op,
                    "provider": provider,
                    **case,
                    **q,
                    "bytes_moved": moved,
                    "gbps": rate / 1e9 if rate else None,
                    "copy_fraction": rate / self.copy_bw if rate else None,
                    **extra,
                }
            )


def run_case(rec: Recorder, bsz: int, tokens: int, g: torch.Generator) -> None:
    """Every op for B requests of ``tokens`` tokens each, at every row width."""
    args, device = rec.args, rec.device
    extend = min(args.extend, tokens)
    req_pages, prefix, ext, num_pages = make_batch(bsz, tokens, extend, device, g)
    case = {"case": f"B={bsz} tok={tokens // K}K ext={extend}", "B": bsz}
    case |= {"tokens_per_req": tokens, "extend": extend, "row_bytes": 0}
    layout = cr.plan_layout(req_pages, prefix, ext, P, num_pages)
    token_req, _, loc = cr.current_tokens(layout)
    n_rows = min(layout.num_tokens, args.remap_rows)
    locs = torch.empty(n_rows, args.topk, dtype=torch.int32, device=device)
    locs.random_(-1, num_pages * P)  # pool locations, -1 = absent
    req_id, out = token_req[:n_rows].contiguous(), torch.empty_like(locs)

    def ops(op: str) -> dict[str, Callable]:
        return providers_for(op, device, args.providers)

    plan = {
        n: partial(cr.plan_layout, req_pages, prefix, ext, P, num_pages, backend=n)
        for n in ops("build_inverse")
    }
    rec("plan_layout", case, plan, 0)
    inv = {
        n: partial(f, layout.slot_table, layout.req_pages, num_pages)
        for n, f in ops("build_inverse").items()
    }
    rec("build_inverse", case, inv, bsz * num_pages * 4)
    mask = {
        n: partial(f, layout.req_pages, layout.prefix_lens, layout.extend_lens, P)
        for n, f in ops("current_page_mask").items()
    }
    rec("current_page_mask", case, mask, 0)
    remap = {
        n: partial(f, locs, req_id, layout.inverse, P, out) for n, f in ops("remap_locs").items()
    }
    rec("remap_locs", case, remap, 2 * locs.numel() * 4, locs_shape=list(locs.shape))
    for width in args.widths:
        pool = rand_rows((num_pages, P), width, device)
        dense = torch.empty((layout.num_slots, P, pool.shape[-1]), dtype=pool.dtype, device=device)
        current = rand_rows((layout.num_tokens,), width, device)
        wide = {**case, "row_bytes": width}
        mat = {n: partial(f, pool, layout.slot_page, dense) for n, f in ops("materialize").items()}
        rec("materialize", wide, mat, 2 * layout.materialize_bytes(width))
        fill = {
            n: partial(f, dense, current, token_req, loc, layout.inverse, P)
            for n, f in ops("fill_current").items()
        }
        rec("fill_current", wide, fill, 2 * layout.num_tokens * width)
        del pool, dense, current, mat, fill


def run_dedup(rec: Recorder) -> None:
    """8 requests sharing a 64K-token prefix: bytes (and time) to materialise with/without dedup."""
    args, device = rec.args, rec.device
    req_pages, prefix, ext, num_pages = shared_prefix_batch(8, 64 * K, args.extend, device)
    for dedup in (True, False):
        layout = cr.plan_layout(req_pages, prefix, ext, P, num_pages, dedup=dedup)
        case = {"case": f"8 x 64K shared prefix, dedup={'on' if dedup else 'off'}", "B": 8}
        case |= {"tokens_per_req": 64 * K + args.extend, "extend": args.extend}
        for width in args.widths:
            pool = rand_rows((num_pages, P), width, device)
            dense = torch.empty(
                (layout.num_slots, P, pool.shape[-1]), dtype=pool.dtype, device=device
            )
            mat = {
                n: partial(f, pool, layout.slot_page, dense)
                for n, f in providers_for("materialize", device, args.providers).items()
            }
            moved = layout.materialize_bytes(width)
            extra = {"materialized_bytes": moved, "num_slots": layout.num_slots, "dedup": dedup}
            rec("materialize_dedup", {**case, "row_bytes": width}, mat, 2 * moved, **extra)
            del pool, dense, mat


def cases(args) -> list[tuple[int, int]]:
    """(B, tokens per request) within the memory cap (pool + dense at the widest row, x2 slack)."""
    grid = [(b, t * K) for b in args.batch for t in args.tokens]
    widest = max(args.widths)
    keep = [(b, t) for b, t in grid if 4 * b * t * widest <= args.max_gib * 1024**3]
    for b, t in sorted(set(grid) - set(keep)):
        print(f"skip B={b} tok={t // K}K: over --max-gib {args.max_gib}", file=sys.stderr)
    return keep


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="small sizes (the CPU run)")
    p.add_argument("--out", default="docs/benchmarks", help="directory for JSON + PNG")
    p.add_argument("--merge", help="JSON whose rows not measured again are kept (default: --out's)")
    p.add_argument("--md", help="record whose generated tables are rewritten")
    p.add_argument("--render", action="store_true", help="write JSON, PNG, --md without measuring")
    p.add_argument("--providers", default="torch,triton,cuda")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (20; quick: 15)")
    p.add_argument("--max-gib", type=float, help="memory cap per case (48; quick: 2)")
    p.add_argument("--threads", type=int, help="CPU intra-op threads (default: torch's choice)")
    args = p.parse_args(argv)
    args.providers = [s.strip() for s in args.providers.split(",") if s.strip()]
    args.widths = sorted(WIDTHS, reverse=True)
    if args.quick:
        args.batch, args.tokens, args.extend = [1, 8, 32], [8, 32], 1024
        args.remap_rows, args.topk, args.reps = 2048, 512, args.reps or 15
        args.max_gib = args.max_gib or 2.0
    else:
        args.batch, args.tokens, args.extend = [1, 8, 32], [8, 32, 128], 4096
        args.remap_rows, args.topk, args.reps = 16384, 2048, args.reps or 20
        args.max_gib = args.max_gib or 48.0
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:
        REPORT.publish([], args.out, md=args.md, recorded=args.merge)
        return
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    copy_bw = copy_bandwidth(device, (1024 if device.type == "cuda" else 128) * M, args.reps)
    rows: list[dict] = []
    rec = Recorder(args, device, copy_bw, rows)
    for bsz, tokens in cases(args):
        run_case(rec, bsz, tokens, g)
    run_dedup(rec)
    env = benchkit.capture_env(device=args.device, package="cpkv-runtime")
    meta = {"device": device.type, **env, "copy_bw_gbps": copy_bw / 1e9}
    rows = [{**meta, **r} for r in rows]
    print_table(rows)
    REPORT.publish(rows, args.out, md=args.md, recorded=args.merge)
    print(f"wrote {REPORT.json_path(args.out)}")


if __name__ == "__main__":
    main()
