"""CUDA: every backend that runs on CUDA tensors matches the CPU torch definition bitwise.

Run on the H200 (see docs/benchmarks/cpkv-runtime.md for the command); skipped without CUDA.
"""

from __future__ import annotations

import _oracle
import cpkv_runtime as cr
import pytest
import torch
from _scenarios import ADVERSARIAL, SCENARIOS, run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")


@pytest.fixture(scope="module", params=["torch", "triton", "cuda"])
def gpu_backend(request) -> str:
    found = cr.available_backends().get(request.param)
    if found is None or not found.supports("materialize", CUDA):
        why = "not registered" if found is None else (found.reason or "does not run on cuda")
        pytest.skip(f"backend {request.param!r}: {why}")
    return request.param


def _to(batch_run, device):
    return {
        k: getattr(batch_run, k).to(device)
        for k in ("kv_pool", "current_kv", "token_req", "out_cache_loc")
    }


@pytest.mark.parametrize("name", sorted({**SCENARIOS, **ADVERSARIAL}))
def test_scenarios_on_cuda_match_cpu(name, gpu_backend):
    batch = {**SCENARIOS, **ADVERSARIAL}[name]
    ref = run(batch)
    layout = cr.plan_layout(
        torch.tensor(batch.req_pages, device=CUDA),
        torch.tensor(batch.prefix, device=CUDA),
        torch.tensor(batch.extend, device=CUDA),
        batch.page_size,
        batch.num_pages,
        backend=gpu_backend,
    )
    assert torch.equal(layout.inverse.cpu(), ref.layout.inverse)
    t = _to(ref, CUDA)
    dense = cr.materialize(t["kv_pool"], layout, backend=gpu_backend)
    cr.fill_current(
        dense, t["current_kv"], t["token_req"], t["out_cache_loc"], layout, backend=gpu_backend
    )
    assert torch.equal(dense.cpu(), ref.dense)
    cr.check_invariants(
        layout, t["kv_pool"], dense, t["current_kv"], t["token_req"], t["out_cache_loc"]
    )
    locs = torch.arange(-1, batch.num_pages * batch.page_size, device=CUDA)
    locs = locs.view(1, -1).expand(layout.batch_size, -1).contiguous()
    req = torch.arange(layout.batch_size, device=CUDA)
    got = cr.remap_locs(locs, req, layout, backend=gpu_backend)
    assert torch.equal(got.cpu(), cr.remap_locs(locs.cpu(), req.cpu(), ref.layout))
    assert torch.equal(
        cr.current_page_mask(layout, backend=gpu_backend).cpu(), cr.current_page_mask(ref.layout)
    )


@pytest.mark.parametrize(
    ("dtype", "width"),
    [(torch.bfloat16, 576), (torch.uint8, 656), (torch.uint8, 132)],
    ids=["1152B", "656B", "132B"],
)
def test_production_shapes_match_cpu(dtype, width, gpu_backend):
    """B=8, 8K-token sequences sharing a 4K prefix, P=64, 512-token chunks; rows of every width."""
    page_size, bsz, prefix, chunk = 64, 8, 8192 - 512, 512
    shared = (prefix // 2) // page_size
    num_pages = shared + bsz * (8192 // page_size - shared)
    g = torch.Generator().manual_seed(0)
    private = torch.randperm(num_pages - shared, generator=g) + shared
    per_req = 8192 // page_size - shared
    rows = torch.stack(
        [
            torch.cat([torch.arange(shared), private[b * per_req : (b + 1) * per_req]])
            for b in range(bsz)
        ]
    ).int()
    args = (rows, torch.full((bsz,), prefix), torch.full((bsz,), chunk), page_size, num_pages)
    ref = cr.plan_layout(*args)
    layout = cr.plan_layout(
        *(a.to(CUDA) if torch.is_tensor(a) else a for a in args), backend=gpu_backend
    )
    assert torch.equal(layout.inverse.cpu(), ref.inverse)
    pool = torch.randint(
        0,
        256,
        (num_pages, page_size, width * torch.empty((), dtype=dtype).element_size()),
        dtype=torch.uint8,
        generator=g,
    ).view(dtype)
    token_req, _, loc = cr.current_tokens(ref)
    current = torch.randint(
        0,
        256,
        (ref.num_tokens, pool.shape[-1] * pool.element_size()),
        dtype=torch.uint8,
        generator=g,
    ).view(dtype)
    want = cr.fill_current(cr.materialize(pool, ref), current, token_req, loc, ref)
    dense = cr.materialize(pool.to(CUDA), layout, backend=gpu_backend)
    cr.fill_current(
        dense, current.to(CUDA), token_req.to(CUDA), loc.to(CUDA), layout, backend=gpu_backend
    )
    torch.cuda.synchronize()
    assert torch.equal(dense.cpu().view(torch.uint8), want.view(torch.uint8))
    topk = torch.randint(-1, num_pages * page_size, (4096, 2048), generator=g)
    req = torch.randint(0, bsz, (4096,), generator=g)
    got = cr.remap_locs(topk.to(CUDA), req.to(CUDA), layout, backend=gpu_backend)
    assert torch.equal(got.cpu(), cr.remap_locs(topk, req, ref))


def test_cp_helpers_on_cuda():
    extend = torch.tensor([513, 0, 64, 7], device=CUDA)
    token = torch.arange(int(extend.sum()), device=CUDA)
    for strategy in ("zigzag", "interleave"):
        split = cr.cp_split(extend, 8, token, strategy=strategy)
        assert split.rows.device.type == "cuda"
        assert split.rows.tolist() == _oracle.cp_split(extend.tolist(), 8, strategy)
        (local,) = split.companions
        assert torch.equal(cr.gather_order(local.reshape(-1), split), token)
        assert torch.equal(cr.localize(token, split, 5), local[5])
