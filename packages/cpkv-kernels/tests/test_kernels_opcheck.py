"""torch.library.opcheck on every Triton custom op, and tracing under torch.compile (fullgraph).

Runs wherever the Triton kernels run (CPU under TRITON_INTERPRET=1, else CUDA); the CUDA ops get
the same checks in test_kernels_gpu.py.
"""

from __future__ import annotations

import cpkv_runtime
import pytest
import torch
from _cases import make_data, named_batches
from _compare import assert_bitwise_equal
from cpkv_kernels._plan_workspace import workspace_size
from cpkv_runtime import NO_TRITON, OP_NAMES

TORCH_OPS = cpkv_runtime.available_backends()["torch"].ops


def _args(device: str, impl: str = "triton") -> dict[str, tuple]:
    """Arguments of every ``cpkv::<op>_<impl>`` op on one named batch (the CUDA planner
    allocates its outputs; the Triton one writes a workspace and the inverse it is given)."""
    d = make_data(named_batches(16)[0], "132B", device)
    lay = d.layout
    dense = torch.empty((lay.num_slots, 16, 132), dtype=torch.uint8, device=device)
    loc = d.out_cache_loc
    sources = TORCH_OPS["fill_sources"](d.token_req, loc, lay.inverse, 16, lay.num_slots)
    used = torch.tensor([lay.num_slots - 1], dtype=torch.int32, device=device)
    plan = (
        lay.req_pages, lay.prefix_lens, lay.extend_lens, 16, lay.num_pages,
        lay.req_pages.numel(), True,
    )  # fmt: skip
    if impl == "triton":
        plan = (
            *plan,
            torch.empty(
                workspace_size(lay.batch_size, lay.max_pages, lay.req_pages.numel()),
                dtype=torch.int32,
                device=device,
            ),
            torch.empty((lay.batch_size + 1, lay.num_pages), dtype=torch.int32, device=device),
        )
    dense_args = (d.kv_pool, lay.slot_page, d.current_kv, sources, used, dense)
    shard = {}
    if impl == "cuda":  # no Triton kernel (cpkv_runtime.NO_TRITON)
        p, bsz = 16, lay.batch_size
        offsets = torch.arange(p, device=device)
        r2t = (lay.req_pages.long().unsqueeze(2) * p + offsets).view(bsz, -1).int()
        lens = [*lay.prefix_lens.tolist(), *lay.extend_lens.tolist()]
        cap = lay.req_pages.numel()
        shard = {
            "shard_plan": (r2t, torch.arange(bsz, device=device), d.out_cache_loc.clamp(min=0),
                           lens, [0], lay.max_pages, p, lay.num_pages, cap, 2, 1, 2 * cap,
                           3 * cap, True),
        }  # fmt: skip
    return shard | {
        "build_inverse": (
            lay.slot_table,
            lay.req_pages,
            lay.num_pages,
            torch.empty((lay.batch_size, lay.num_pages), dtype=torch.int32, device=device),
        ),
        "materialize": (d.kv_pool, lay.slot_page, dense),
        "fill_current": (dense, d.current_kv, d.token_req, d.out_cache_loc, lay.inverse, 16),
        "remap_locs": (d.locs, d.req_id, lay.inverse, 16, torch.empty_like(d.locs)),
        "current_page_mask": (
            lay.req_pages,
            lay.prefix_lens,
            lay.extend_lens,
            16,
            torch.empty(lay.req_pages.shape, dtype=torch.bool, device=device),
        ),
        "plan_slots": plan,
        "fill_sources": (d.token_req, d.out_cache_loc, lay.inverse, 16, lay.num_slots),
        "build_dense": dense_args,
        "layer_step": (*dense_args, d.locs, d.req_id, lay.inverse, 16, torch.empty_like(d.locs)),
    }


@pytest.mark.parametrize("op", [op for op in OP_NAMES if op not in NO_TRITON])
def test_opcheck_triton(op, device):
    torch.library.opcheck(getattr(torch.ops.cpkv, f"{op}_triton").default, _args(device)[op])


def _pipeline(
    ops,
    kv_pool,
    slot_table,
    req_pages,
    slot_page,
    num_pages,
    cur,
    treq,
    loc,
    locs,
    rid,
    prefix,
    extend,
):
    inverse = ops["build_inverse"](slot_table, req_pages, num_pages)
    dense = ops["materialize"](kv_pool, slot_page)
    ops["fill_current"](dense, cur, treq, loc, inverse, 16)
    mapped = ops["remap_locs"](locs, rid, inverse, 16)
    mask = ops["current_page_mask"](req_pages, prefix, extend, 16)
    return inverse, dense, mapped, mask


@pytest.mark.filterwarnings("ignore:TensorFloat32 tensor cores:UserWarning")  # inductor on CUDA
@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_compile_fullgraph(impl, device, impls, torch_ops):
    """The whole op sequence traces as one graph (fake kernels, no graph breaks) and matches."""
    if impl not in impls:
        pytest.skip(f"{impl} kernels do not run here")
    torch._dynamo.reset()
    d = make_data(named_batches(16)[1], "656B", device)
    lay = d.layout
    args = (
        d.kv_pool,
        lay.slot_table,
        lay.req_pages,
        lay.slot_page,
        lay.num_pages,
        d.current_kv,
        d.token_req,
        d.out_cache_loc,
        d.locs,
        d.req_id,
        lay.prefix_lens,
        lay.extend_lens,
    )
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(lambda *a: _pipeline(impls[impl], *a), fullgraph=True, backend=backend)
    got = compiled(*args)
    want = _pipeline(torch_ops, *args)
    for name, g, w in zip(("inverse", "dense", "remap", "mask"), got, want, strict=True):
        assert_bitwise_equal(f"compiled {name}", g, w, min(g.dim(), 2), "index")


@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_compile_fullgraph_plan_slots(impl, device, impls, torch_ops):
    """The planner traces as one graph too (its outputs are views of one workspace)."""
    if impl not in impls:
        pytest.skip(f"{impl} kernels do not run here")
    torch._dynamo.reset()
    lay = make_data(named_batches(16)[0], "132B", device).layout
    args = (lay.req_pages, lay.prefix_lens, lay.extend_lens, 16, lay.num_pages, 20, True)
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(
        lambda *a: impls[impl]["plan_slots"](*a), fullgraph=True, backend=backend
    )
    for got, want in zip(compiled(*args), torch_ops["plan_slots"](*args), strict=True):
        assert_bitwise_equal("compiled plan_slots", got, want, min(got.dim(), 2), "index")
