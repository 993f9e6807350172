"""Benchmark cases of bench_kernels.py: one ``setup_<op>(ops, ...)`` per op returning the
providers' callables, the bytes one call moves and the bitwise parity of triton/cuda vs torch."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import cpkv_runtime as cr
import torch

ROWS = {
    "656B": ((656,), torch.uint8),
    "1152B": ((576,), torch.bfloat16),
    "132B": ((132,), torch.uint8),
}
P = 64
IMPLS = ("torch", "triton", "cuda")
DEV = "cuda"


def check(name: str, fn: Callable[[], bool]) -> bool:
    """Run one parity check; a provider that fails to run counts as not matching (and says why)."""
    try:
        return bool(fn())
    except Exception as exc:
        print(f"  {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return False


def rand_rows(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    es = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * es), dtype=torch.uint8, device=DEV)
    return raw.view(dtype)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def plan(bsz: int, prefix: int, extend: int, num_pages: int, shared: int = 0) -> cr.Layout:
    """``bsz`` requests of prefix + extend tokens on random pool pages; the first ``shared`` pages
    of every request are common (a radix-cache hit)."""
    need = math.ceil((prefix + extend) / P)
    perm = torch.randperm(num_pages, device=DEV).int()
    common, rest = perm[:shared], perm[shared:]
    own = need - shared
    rows = [torch.cat([common, rest[b * own : (b + 1) * own]]) for b in range(bsz)]
    return cr.plan_layout(torch.stack(rows), [prefix] * bsz, [extend] * bsz, P, num_pages)


Setup = tuple[dict[str, Callable[[], object]], int, dict[str, bool]]


def setup_materialize(ops, row: str, mib: int) -> Setup:
    shape, dtype = ROWS[row]
    page_bytes = P * shape[0] * torch.empty((), dtype=dtype).element_size()
    slots = max(1, mib * 2**20 // page_bytes)
    pool = rand_rows((2 * slots + 7, P, *shape), dtype)
    slot_page = torch.randperm(pool.shape[0], device=DEV)[:slots].int()
    index, out = slot_page.long(), torch.empty((slots, P, *shape), dtype=dtype, device=DEV)
    want = ops["torch"]["materialize"](pool, slot_page)
    parity = {
        n: check(n, lambda n=n: same_bytes(ops[n]["materialize"](pool, slot_page), want))
        for n in IMPLS[1:]
    }
    provs = {n: (lambda n=n: ops[n]["materialize"](pool, slot_page, out)) for n in IMPLS}
    provs["index_select"] = lambda: torch.index_select(pool, 0, index, out=out)
    src = pool[:slots]
    provs["copy"] = lambda: out.copy_(src)
    return provs, 2 * slots * page_bytes, parity


def setup_fill_current(ops, row: str, tokens: int) -> Setup:
    shape, dtype = ROWS[row]
    row_bytes = shape[0] * torch.empty((), dtype=dtype).element_size()
    bsz = 8
    extend = tokens // bsz
    lay = plan(bsz, 1000, extend, bsz * math.ceil((1000 + extend) / P) + 64)
    token_req, _, loc = cr.current_tokens(lay)
    dense = rand_rows((lay.num_slots, P, *shape), dtype)
    cur = rand_rows((token_req.shape[0], *shape), dtype)
    args = (cur, token_req, loc, lay.inverse, P)
    want = dense.clone()
    ops["torch"]["fill_current"](want, *args)

    def run_fill(n: str) -> bool:
        got = dense.clone()
        ops[n]["fill_current"](got, *args)
        return same_bytes(got, want)

    parity = {n: check(n, lambda n=n: run_fill(n)) for n in IMPLS[1:]}
    provs = {n: (lambda n=n: ops[n]["fill_current"](dense, *args)) for n in IMPLS}
    dst = cr.remap_locs(loc, token_req, lay, backend="torch").long()  # dense row of each token
    flat = dense.view(-1, *shape)
    provs["index_copy_"] = lambda: flat.index_copy_(0, dst, cur)
    buf = torch.empty_like(cur)
    provs["copy"] = lambda: buf.copy_(cur)
    return provs, 2 * token_req.shape[0] * row_bytes, parity


def setup_remap_locs(ops, rows: int, topk: int) -> Setup:
    bsz, seq = 8, 131072
    pages = seq // P
    lay = plan(bsz, seq - rows // bsz, rows // bsz, bsz * pages + 512)
    req_id = torch.arange(bsz, device=DEV).repeat_interleave(rows // bsz).int()
    j = torch.randint(0, pages, (rows, topk), device=DEV)
    page = lay.req_pages.long()[req_id.long().unsqueeze(1), j]
    locs = (page * P + torch.randint(0, P, (rows, topk), device=DEV)).int()
    locs = torch.where(torch.rand(rows, topk, device=DEV) < 0.05, -1, locs).squeeze(1).contiguous()
    out = torch.empty_like(locs)
    want = ops["torch"]["remap_locs"](locs, req_id, lay.inverse, P)
    parity = {
        n: torch.equal(ops[n]["remap_locs"](locs, req_id, lay.inverse, P), want) for n in IMPLS[1:]
    }
    provs = {
        n: (lambda n=n: ops[n]["remap_locs"](locs, req_id, lay.inverse, P, out)) for n in IMPLS
    }
    provs["copy"] = lambda: out.copy_(locs)
    return provs, 2 * locs.numel() * 4, parity


def setup_build_inverse(ops, bsz: int, num_pages: int) -> Setup:
    shared = 0 if bsz * 2048 <= num_pages else 1536
    lay = plan(bsz, 2048 * P - 100, 100, num_pages, shared=shared)
    args = (lay.slot_table, lay.req_pages, num_pages)
    want = ops["torch"]["build_inverse"](*args)
    parity = {
        n: check(n, lambda n=n: torch.equal(ops[n]["build_inverse"](*args), want))
        for n in IMPLS[1:]
    }
    provs = {n: (lambda n=n: ops[n]["build_inverse"](*args)) for n in IMPLS}
    return provs, bsz * num_pages * 4 + 2 * lay.slot_table.numel() * 4, parity


def setup_current_page_mask(ops, bsz: int, max_pages: int) -> Setup:
    lay = plan(bsz, (max_pages - 8) * P + 5, 400, bsz * max_pages + 64)
    args = (lay.req_pages, lay.prefix_lens, lay.extend_lens, P)
    want = ops["torch"]["current_page_mask"](*args)
    parity = {
        n: check(n, lambda n=n: torch.equal(ops[n]["current_page_mask"](*args), want))
        for n in IMPLS[1:]
    }
    provs = {n: (lambda n=n: ops[n]["current_page_mask"](*args)) for n in IMPLS}
    return provs, lay.req_pages.numel(), parity


def cases(quick: bool) -> list[tuple[str, str, dict[str, object], Callable]]:
    per_row = {  # op: (case label, setup, sizes) for every row format
        "materialize": (
            "dense={}MiB",
            setup_materialize,
            (8, 64, 256) if quick else (8, 64, 256, 1024),
        ),
        "fill_current": (
            "T={}",
            setup_fill_current,
            (16384, 131072) if quick else (16384, 65536, 262144, 1048576),
        ),
    }
    out = [
        (op, f"{row} {label.format(n)}", {"row": row}, lambda o, f=setup, r=row, n=n: f(o, r, n))
        for op, (label, setup, sizes) in per_row.items()
        for row in ROWS
        for n in sizes
    ]
    out += [
        ("remap_locs", "[16384,2048] int32 B=8", {}, lambda o: setup_remap_locs(o, 16384, 2048)),
        ("remap_locs", "[65536] int32 B=8", {}, lambda o: setup_remap_locs(o, 65536, 1)),
        ("build_inverse", "B=8 pages=40000", {}, lambda o: setup_build_inverse(o, 8, 40000)),
        ("build_inverse", "B=32 pages=40000", {}, lambda o: setup_build_inverse(o, 32, 40000)),
        ("current_page_mask", "B=8 M=2048", {}, lambda o: setup_current_page_mask(o, 8, 2048)),
        ("current_page_mask", "B=32 M=2048", {}, lambda o: setup_current_page_mask(o, 32, 2048)),
    ]
    return out


def load_ops() -> dict[str, dict[str, Callable]]:
    from cpkv_kernels import _cuda_ops
    from cpkv_kernels._api import make_ops

    _cuda_ops.load()
    import cpkv_kernels.ops  # noqa: F401

    return {
        "torch": cr.available_backends()["torch"].ops,
        "triton": make_ops("triton"),
        "cuda": make_ops("cuda"),
    }
