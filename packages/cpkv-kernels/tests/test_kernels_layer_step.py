"""The per-forward plan and the per-layer sequence on the kernels, against the torch path.

The torch path is the definition end to end: ``plan_layout`` (exact layout) then the torch
``materialize``/``fill_current``/``remap_locs``. The kernel path is ``plan_layout_static`` on the
kernel then a ``LayerStep`` on the kernels' bare launchers. They must agree bitwise on every used
slot and every remapped location, and the kernel path must never write a padding slot.

On a CPU-only machine the Triton path runs interpreted at small sizes; on a GPU the same test
runs the compiled Triton and CUDA kernels, and the GPU section runs production shapes (8 requests
x (64K shared prefix + 2K new), P = 64, top-k 2048, 656-byte fp8 and 1152-byte bf16 rows) eager,
graph-captured and replayed on new contents, with the planner captured too, and checks that the
whole per-forward path makes no host sync.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import cpkv_runtime as cr
import pytest
import torch
from _cases import ROWS, random_batch, random_rows
from _compare import assert_bitwise_equal

SENTINEL = 0x5A  # byte pattern of never-written padding slots


@dataclass
class Case:
    """One forward's inputs: batch, pool, current rows (CP padding rows at the end), top-k."""

    req_pages: torch.Tensor
    prefix: torch.Tensor
    extend: torch.Tensor
    page_size: int
    num_pages: int
    kv_pool: torch.Tensor
    current_kv: torch.Tensor
    token_req: torch.Tensor
    loc: torch.Tensor
    topk: torch.Tensor

    def exact(self) -> cr.Layout:
        return cr.plan_layout(
            self.req_pages, self.prefix, self.extend, self.page_size, self.num_pages
        )

    def static(self, backend: str, **kwargs) -> cr.Layout:
        return cr.plan_layout_static(
            self.req_pages,
            self.prefix,
            self.extend,
            self.page_size,
            self.num_pages,
            backend=backend,
            **kwargs,
        )


def make_case(
    req_pages: torch.Tensor,
    prefix: list[int],
    extend: list[int],
    page_size: int,
    num_pages: int,
    row: str,
    topk: int,
    pad_rows: int = 16,
) -> Case:
    """Random pool and current rows; top-k locations of each row's own request (10% -1)."""
    device = req_pages.device
    shape, dtype = ROWS[row]
    prefix_t = torch.tensor(prefix, device=device)
    extend_t = torch.tensor(extend, device=device)
    exact = cr.plan_layout(req_pages, prefix_t, extend_t, page_size, num_pages)
    token_req, token_pos, loc = cr.current_tokens(exact)
    token_req = torch.cat([token_req, torch.zeros(pad_rows, dtype=torch.int32, device=device)])
    loc = torch.cat([loc, torch.full((pad_rows,), -1, dtype=torch.int32, device=device)])
    pos = torch.cat([token_pos, torch.zeros(pad_rows, dtype=torch.int32, device=device)])
    seen = (pos.long() + 1).unsqueeze(1)  # causal: a row sees positions 0..pos
    picks = (torch.rand(loc.shape[0], topk, device=device) * seen).long()
    pages = exact.req_pages.long()[token_req.long().unsqueeze(1), picks // page_size]
    topk_locs = pages * page_size + picks % page_size
    drop = (torch.rand(topk_locs.shape, device=device) < 0.1) | (loc < 0).unsqueeze(1)
    return Case(
        req_pages=req_pages,
        prefix=prefix_t,
        extend=extend_t,
        page_size=page_size,
        num_pages=num_pages,
        kv_pool=random_rows((num_pages, page_size, *shape), dtype, str(device)),
        current_kv=random_rows((loc.shape[0], *shape), dtype, str(device)),
        token_req=token_req,
        loc=loc,
        topk=torch.where(drop, -1, topk_locs).int(),
    )


def torch_path(case: Case) -> tuple[cr.Layout, torch.Tensor, torch.Tensor]:
    """The definition: exact plan, torch ops."""
    exact = case.exact()
    dense = cr.materialize(case.kv_pool, exact, backend="torch")
    cr.fill_current(dense, case.current_kv, case.token_req, case.loc, exact, backend="torch")
    mapped = cr.remap_locs(case.topk, case.token_req, exact, backend="torch")
    return exact, dense, mapped


def buffers(case: Case, layout: cr.Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense buffer prefilled with the sentinel bytes, and the remap output."""
    dense = torch.empty(
        (layout.num_slots, *case.kv_pool.shape[1:]),
        dtype=case.kv_pool.dtype,
        device=case.kv_pool.device,
    )
    dense.view(torch.uint8).fill_(SENTINEL)
    return dense, torch.empty_like(case.topk)


def assert_matches(label: str, case: Case, dense: torch.Tensor, mapped: torch.Tensor) -> None:
    exact, want_dense, want_mapped = torch_path(case)
    n = exact.num_slots
    assert_bitwise_equal(f"{label} dense", dense[:n], want_dense, 2, "(slot, row)")
    assert (dense[n:].reshape(-1).view(torch.uint8) == SENTINEL).all(), f"{label}: padding written"
    assert_bitwise_equal(f"{label} remap", mapped, want_mapped, 2, "(row, k)")


@pytest.mark.parametrize("row", ["656B", "1152B", "7B"])
@pytest.mark.parametrize("share", [0.0, 0.6, 1.0])
def test_step_matches_torch_path(share, row, device, impls):
    rng = random.Random(f"step-{share}-{row}")
    batch = random_batch(rng, 5, 16, share, max_seq=200)
    rows = torch.tensor(batch.req_pages, dtype=torch.int32, device=device).view(5, -1)
    case = make_case(rows, batch.prefix, batch.extend, 16, batch.num_pages, row, topk=32)
    for impl in impls:
        layout = case.static(impl, max_slots=rows.numel())
        step = cr.prepare_layer_step(layout, case.token_req, case.loc, backend=impl)
        ops = ("fill_sources", "build_dense", "remap_locs", "layer_step")
        assert step.backends == dict.fromkeys(ops, impl)
        dense, mapped = buffers(case, layout)
        step(case.kv_pool, case.current_kv, case.topk, dense, mapped)
        assert_matches(f"{impl} share={share} {row}", case, dense, mapped)


# --- GPU: production shapes, CUDA graphs, no host sync ------------------------------------

BSZ, PREFIX, NEW, PAGE, TOPK = 8, 65536, 2048, 64, 2048
CAPACITY = BSZ * (PREFIX + NEW) // PAGE  # sum(ceil(seq_lens / P)): what a host knows


def gpu(fn):
    """GPU-only test (marker ``gpu``; skipped without CUDA)."""
    needs = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    return pytest.mark.gpu(needs(fn))


def production_case(row: str, seed: int = 0) -> Case:
    """8 requests x (64K shared prefix + 2K new), pages shuffled over a pool with spare pages."""
    gen = torch.Generator().manual_seed(seed)
    shared, own = PREFIX // PAGE, NEW // PAGE
    num_pages = shared + BSZ * own + 256
    perm = torch.randperm(num_pages, generator=gen)
    rows = [
        torch.cat([perm[:shared], perm[shared + b * own : shared + (b + 1) * own]])
        for b in range(BSZ)
    ]
    req_pages = torch.stack(rows).int().cuda()
    return make_case(req_pages, [PREFIX] * BSZ, [NEW] * BSZ, PAGE, num_pages, row, TOPK)


def capture(fn) -> torch.cuda.CUDAGraph:
    """Warm ``fn`` up on a side stream (compiles, loads), then capture it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def load(dst: Case, src: Case) -> None:
    """Copy a new forward's inputs into the tensors a captured graph reads."""
    for name in ("req_pages", "kv_pool", "current_kv", "token_req", "loc", "topk"):
        getattr(dst, name).copy_(getattr(src, name))


@gpu
@pytest.mark.parametrize("row", ["656B", "1152B"])
@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_production_shapes_eager_and_graph(impl, row, impls):
    case = production_case(row)
    layout = case.static(impl, max_slots=CAPACITY)
    assert int(layout.used_slots) == (PREFIX + BSZ * NEW) // PAGE  # the prefix once
    step = cr.prepare_layer_step(layout, case.token_req, case.loc, backend=impl)
    dense, mapped = buffers(case, layout)
    step(case.kv_pool, case.current_kv, case.topk, dense, mapped)
    torch.cuda.synchronize()
    assert_matches(f"{impl} {row} eager", case, dense, mapped)

    graph = capture(lambda: step(case.kv_pool, case.current_kv, case.topk, dense, mapped))
    for replay in range(2):  # new contents each replay: the graph reads them, not a copy
        case.kv_pool.view(torch.uint8).random_(0, 256)
        case.current_kv.view(torch.uint8).random_(0, 256)
        case.topk.copy_(case.topk.roll(replay + 1, 1))
        dense.view(torch.uint8).fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(f"{impl} {row} graph replay {replay}", case, dense, mapped)


@gpu
@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_plan_and_step_in_one_graph(impl, impls):
    """The planner captures too: replaying on another batch of the same shapes re-plans it."""
    case = production_case("656B", seed=0)
    dense = mapped = None
    planned: list[cr.Layout] = []

    def forward() -> None:
        nonlocal dense, mapped
        layout = case.static(impl, max_slots=CAPACITY, num_tokens=BSZ * NEW, validate=False)
        step = cr.prepare_layer_step(layout, case.token_req, case.loc, backend=impl, validate=False)
        if dense is None:
            dense, mapped = buffers(case, layout)
        step(case.kv_pool, case.current_kv, case.topk, dense, mapped)
        planned.append(layout)

    graph = capture(forward)
    layout = planned[-1]  # the captured plan's tensors, rewritten by each replay
    for seed in (1, 2):
        new = production_case("656B", seed=seed)
        load(case, new)
        dense.view(torch.uint8).fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        exact = new.exact()
        assert_bitwise_equal(
            f"{impl} seed {seed} slot_table", layout.slot_table, exact.slot_table, 2, "(b, j)"
        )
        assert_bitwise_equal(
            f"{impl} seed {seed} inverse", layout.inverse, exact.inverse, 2, "(b, page)"
        )
        assert int(layout.status) == 0
        assert_matches(f"{impl} plan+step graph seed {seed}", new, dense, mapped)


@gpu
@pytest.mark.parametrize("impl", ["torch", "triton", "cuda"])
def test_forward_path_makes_no_host_sync(impl, impls):
    """plan (validate=False, num_tokens given) + prepare (validate=False) + 3 layers: no sync.

    torch's sync debug mode raises on any synchronizing call. The torch backend's plan is
    sync-free as well; its fill_current is not (it drops padding rows with nonzero), so torch
    runs the plan only."""
    case = production_case("656B")

    def forward() -> None:
        layout = case.static(impl, max_slots=CAPACITY, num_tokens=BSZ * NEW, validate=False)
        if impl == "torch":
            return
        step = cr.prepare_layer_step(layout, case.token_req, case.loc, backend=impl, validate=False)
        dense, mapped = buffers(case, layout)
        for _ in range(3):
            step(case.kv_pool, case.current_kv, case.topk, dense, mapped)

    forward()  # warm up: compile and load outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        forward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
