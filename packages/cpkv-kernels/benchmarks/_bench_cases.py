"""Benchmark cases of bench_kernels.py: one ``setup_<op>(ops, dev, ...)`` per op returning the
providers' callables, the bytes one call moves and the bitwise parity of triton/cuda vs torch.

Sizes come in three sets: ``full`` (production shapes, the H200 record), ``quick`` (fewer sizes)
and ``tiny`` (a CPU smoke run: torch and interpreted Triton at toy sizes, to exercise every case's
setup, parity check and row without a GPU)."""

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
SIZES = ("full", "quick", "tiny")


def check(name: str, fn: Callable[[], bool]) -> bool:
    """Run one parity check; a provider that fails to run counts as not matching (and says why)."""
    try:
        return bool(fn())
    except Exception as exc:
        print(f"  {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return False


def kernels(ops: dict[str, dict[str, Callable]]) -> list[str]:
    """The kernel providers present (triton, and cuda on a GPU): those checked against torch."""
    return [n for n in IMPLS[1:] if n in ops]


def rand_rows(shape: tuple[int, ...], dtype: torch.dtype, dev: str) -> torch.Tensor:
    es = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * es), dtype=torch.uint8, device=dev)
    return raw.view(dtype)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def plan(
    bsz: int, prefix: int, extend: int, num_pages: int, dev: str, shared: int = 0
) -> cr.Layout:
    """``bsz`` requests of prefix + extend tokens on random pool pages; the first ``shared`` pages
    of every request are common (a radix-cache hit)."""
    need = math.ceil((prefix + extend) / P)
    perm = torch.randperm(num_pages, device=dev).int()
    common, rest = perm[:shared], perm[shared:]
    own = need - shared
    rows = [torch.cat([common, rest[b * own : (b + 1) * own]]) for b in range(bsz)]
    return cr.plan_layout(torch.stack(rows), [prefix] * bsz, [extend] * bsz, P, num_pages)


Setup = tuple[dict[str, Callable[[], object]], int, dict[str, bool]]


def setup_materialize(ops, dev: str, row: str, mib: float) -> Setup:
    shape, dtype = ROWS[row]
    page_bytes = P * shape[0] * torch.empty((), dtype=dtype).element_size()
    slots = max(1, int(mib * 2**20) // page_bytes)
    pool = rand_rows((2 * slots + 7, P, *shape), dtype, dev)
    slot_page = torch.randperm(pool.shape[0], device=dev)[:slots].int()
    index, out = slot_page.long(), torch.empty((slots, P, *shape), dtype=dtype, device=dev)
    want = ops["torch"]["materialize"](pool, slot_page)
    parity = {
        n: check(n, lambda n=n: same_bytes(ops[n]["materialize"](pool, slot_page), want))
        for n in kernels(ops)
    }
    provs = {n: (lambda n=n: ops[n]["materialize"](pool, slot_page, out)) for n in ops}
    provs["index_select"] = lambda: torch.index_select(pool, 0, index, out=out)
    src = pool[:slots]
    provs["copy"] = lambda: out.copy_(src)
    return provs, 2 * slots * page_bytes, parity


def setup_fill_current(ops, dev: str, row: str, tokens: int) -> Setup:
    shape, dtype = ROWS[row]
    row_bytes = shape[0] * torch.empty((), dtype=dtype).element_size()
    bsz = 8
    extend = tokens // bsz
    lay = plan(bsz, 1000, extend, bsz * math.ceil((1000 + extend) / P) + 64, dev)
    token_req, _, loc = cr.current_tokens(lay)
    dense = rand_rows((lay.num_slots, P, *shape), dtype, dev)
    cur = rand_rows((token_req.shape[0], *shape), dtype, dev)
    args = (cur, token_req, loc, lay.inverse, P)
    want = dense.clone()
    ops["torch"]["fill_current"](want, *args)

    def run_fill(n: str) -> bool:
        got = dense.clone()
        ops[n]["fill_current"](got, *args)
        return same_bytes(got, want)

    parity = {n: check(n, lambda n=n: run_fill(n)) for n in kernels(ops)}
    provs = {n: (lambda n=n: ops[n]["fill_current"](dense, *args)) for n in ops}
    dst = cr.remap_locs(loc, token_req, lay, backend="torch").long()  # dense row of each token
    flat = dense.view(-1, *shape)
    provs["index_copy_"] = lambda: flat.index_copy_(0, dst, cur)
    buf = torch.empty_like(cur)
    provs["copy"] = lambda: buf.copy_(cur)
    return provs, 2 * token_req.shape[0] * row_bytes, parity


def setup_remap_locs(ops, dev: str, rows: int, topk: int, seq: int = 131072) -> Setup:
    bsz = 8
    pages = seq // P
    lay = plan(bsz, seq - rows // bsz, rows // bsz, bsz * pages + 512, dev)
    req_id = torch.arange(bsz, device=dev).repeat_interleave(rows // bsz).int()
    j = torch.randint(0, pages, (rows, topk), device=dev)
    page = lay.req_pages.long()[req_id.long().unsqueeze(1), j]
    locs = (page * P + torch.randint(0, P, (rows, topk), device=dev)).int()
    locs = torch.where(torch.rand(rows, topk, device=dev) < 0.05, -1, locs).squeeze(1).contiguous()
    out = torch.empty_like(locs)
    want = ops["torch"]["remap_locs"](locs, req_id, lay.inverse, P)
    parity = {
        n: torch.equal(ops[n]["remap_locs"](locs, req_id, lay.inverse, P), want)
        for n in kernels(ops)
    }
    provs = {n: (lambda n=n: ops[n]["remap_locs"](locs, req_id, lay.inverse, P, out)) for n in ops}
    provs["copy"] = lambda: out.copy_(locs)
    return provs, 2 * locs.numel() * 4, parity


def setup_build_inverse(ops, dev: str, bsz: int, num_pages: int, per_req: int = 2048) -> Setup:
    shared = 0 if bsz * per_req <= num_pages else per_req * 3 // 4
    lay = plan(bsz, per_req * P - 100, 100, num_pages, dev, shared=shared)
    args = (lay.slot_table, lay.req_pages, num_pages)
    want = ops["torch"]["build_inverse"](*args)
    parity = {
        n: check(n, lambda n=n: torch.equal(ops[n]["build_inverse"](*args), want))
        for n in kernels(ops)
    }
    provs = {n: (lambda n=n: ops[n]["build_inverse"](*args)) for n in ops}
    return provs, bsz * num_pages * 4 + 2 * lay.slot_table.numel() * 4, parity


def setup_current_page_mask(ops, dev: str, bsz: int, max_pages: int) -> Setup:
    lay = plan(bsz, (max_pages - 8) * P + 5, 400, bsz * max_pages + 64, dev)
    args = (lay.req_pages, lay.prefix_lens, lay.extend_lens, P)
    want = ops["torch"]["current_page_mask"](*args)
    parity = {
        n: check(n, lambda n=n: torch.equal(ops[n]["current_page_mask"](*args), want))
        for n in kernels(ops)
    }
    provs = {n: (lambda n=n: ops[n]["current_page_mask"](*args)) for n in ops}
    return provs, lay.req_pages.numel(), parity


def cases(size: str, dev: str) -> list[tuple[str, str, dict[str, object], Callable]]:
    """``(op, case label, meta, setup(ops))`` for every case of the ``size`` set on ``dev``."""
    if size not in SIZES:
        raise ValueError(f"size {size!r} is not one of {SIZES}")
    sizes = {  # op: sizes per set, full / quick / tiny
        "materialize": {"full": (8, 64, 256, 1024), "quick": (8, 64, 256), "tiny": (0.25, 1)},
        "fill_current": {"full": (16384, 65536, 262144, 1048576), "quick": (16384, 131072),
                         "tiny": (64, 256)},
    }  # fmt: skip
    per_row = {  # op: (case label, setup) for every row format
        "materialize": ("dense={}MiB", setup_materialize),
        "fill_current": ("T={}", setup_fill_current),
    }
    out = [
        (
            op,
            f"{row} {label.format(n)}",
            {"row": row},
            lambda o, f=setup, r=row, n=n: f(o, dev, r, n),
        )
        for op, (label, setup) in per_row.items()
        for row in ROWS
        for n in sizes[op][size]
    ]
    fixed = {  # size set: (op, case label, setup, its arguments after (ops, dev))
        "full": [
            ("remap_locs", "[16384,2048] int32 B=8", setup_remap_locs, (16384, 2048)),
            ("remap_locs", "[65536] int32 B=8", setup_remap_locs, (65536, 1)),
            ("build_inverse", "B=8 pages=40000", setup_build_inverse, (8, 40000)),
            ("build_inverse", "B=32 pages=40000", setup_build_inverse, (32, 40000)),
            ("current_page_mask", "B=8 M=2048", setup_current_page_mask, (8, 2048)),
            ("current_page_mask", "B=32 M=2048", setup_current_page_mask, (32, 2048)),
        ],
        "tiny": [
            ("remap_locs", "[256,64] int32 B=8", setup_remap_locs, (256, 64, 4096)),
            ("remap_locs", "[1024] int32 B=8", setup_remap_locs, (1024, 1, 4096)),
            ("build_inverse", "B=2 pages=512", setup_build_inverse, (2, 512, 128)),
            ("current_page_mask", "B=2 M=64", setup_current_page_mask, (2, 64)),
        ],
    }
    fixed["quick"] = fixed["full"]
    return [
        *out,
        *((op, label, {}, lambda o, f=f, a=a: f(o, dev, *a)) for op, label, f, a in fixed[size]),
    ]


def load_ops(dev: str) -> dict[str, dict[str, Callable]]:
    """The providers' contract ops: torch, triton and (on CUDA) the JIT-built CUDA kernels.

    On CPU, Triton runs interpreted (``TRITON_INTERPRET=1`` must be set before triton is
    imported) and the CUDA kernels do not exist.
    """
    import cpkv_kernels.ops  # noqa: F401 - registers the cpkv::<op>_triton custom ops
    from cpkv_kernels._api import make_ops

    ops = {"torch": cr.available_backends()["torch"].ops, "triton": make_ops("triton")}
    if dev.startswith("cuda"):
        from cpkv_kernels import _cuda_ops

        _cuda_ops.load()
        ops["cuda"] = make_ops("cuda")
    return ops
