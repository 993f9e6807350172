"""CUDA: the shared-KV per-layer sequence at production shapes, eager and CUDA-graph captured,
bitwise against the torch path; the per-layer step never syncs with the host.

Production shape: GLM-5.1 on one CP-8 rank, 8 requests sharing a 65,536-token prefix plus 2,048
new tokens each, page 64, packed fp8 latent rows (656 B) and indexer pages (8,448 B). The
per-layer step is what ``CpkvSharedKVPool`` runs per layer: pack the owned pages with the page
copy's bare launcher (``shared_kv.pack_launcher``) into this rank's all-gather block, the other
ranks' blocks (one device copy here: one GPU has no peers), the two stores of the current rows
at precomputed rows (``index_copy_``: SGLang's own store kernel in the pool), and the reads
through the page table translated once per forward. The whole per-forward plan
(``current_locs``, ``plan_forward``) syncs with the host exactly once (its one read), its
CUDA ops equal the torch reference's, and the per-layer lookups of the pool never
(``torch.cuda.set_sync_debug_mode``; ``test_shared_kv_syncs.py`` shows the same on CPU with meta
tensors).

Run on the H200: ``uv run --frozen pytest packages/sglang-integration/tests/test_shared_kv_gpu.py
-q -m gpu``.
"""

from __future__ import annotations

import warnings

import cpkv_runtime as cr
import pytest
import torch
from _skv_shapes import P, Req, place
from sglang_cpkv.shared_kv import (
    ScratchGeometry,
    current_locs,
    draft_forward,
    finish_forward,
    pack_launcher,
    plan_forward,
    shard_ops,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")
N, RANK = 8, 3
LATENT, INDEX = 656, 8448  # packed fp8 row bytes per token; indexer bytes per page


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    batch = place("production", [Req("A", 65536, 2048) for _ in range(8)], N)
    local_pages = batch.local_pages + 1
    geo = ScratchGeometry(P, N, RANK, gather_pages=8 * 1024 * 8 // N * N, write_pages=8 * 40)
    r2t = batch.req_to_token().to(CUDA)
    idx = torch.arange(len(batch.pages), device=CUDA)
    plan = plan_forward(
        r2t, idx, batch.prefix, batch.seq, batch.out_cache_loc().to(CUDA), geo, N * local_pages
    )
    table = plan.translate(r2t[:, : max(batch.seq)])
    block = plan.placement.block

    def random_bytes(*shape: int) -> torch.Tensor:
        return torch.randint(0, 256, shape, dtype=torch.uint8, device=CUDA)

    others = torch.ones(N * block, dtype=torch.bool, device=CUDA)
    others[RANK * block : (RANK + 1) * block] = False
    t = {
        "pool": random_bytes(local_pages, P, LATENT),
        "index_pool": random_bytes(local_pages, INDEX),
        "remote": random_bytes(N * block, P, LATENT),
        "others": others[:, None, None],
        "current": random_bytes(batch.num_tokens, LATENT),
    }
    return batch, geo, plan, table, t


def _step(plan, table, t, scratch, index_scratch, local, backend):
    """One layer of the shared-KV path on this rank (see the module docstring)."""
    block = plan.placement.block
    send = scratch[RANK * block : (RANK + 1) * block]
    others = torch.ones(N * block, dtype=torch.bool, device=CUDA)
    others[RANK * block : (RANK + 1) * block] = False
    scratch[: N * block].copy_(
        torch.where(others[:, None, None], t["remote"], scratch[: N * block])
    )
    pack = pack_launcher(CUDA, backend)  # as CpkvSharedKVPool packs: the bare launcher
    pack(t["pool"], plan.placement.send_pages, send)
    pack(
        t["index_pool"], plan.placement.send_pages, index_scratch[RANK * block : (RANK + 1) * block]
    )
    rows = scratch.view(-1, LATENT)
    rows.index_copy_(0, plan.cur_rows, t["current"])
    local.view(-1, LATENT).index_copy_(0, plan.local_rows, t["current"])
    return rows[table]


def _buffers(geo):
    pages = geo.trash_page + 1
    return (
        torch.zeros(pages, P, LATENT, dtype=torch.uint8, device=CUDA),
        torch.zeros(pages, INDEX, dtype=torch.uint8, device=CUDA),
    )


def _backends():
    out = []
    for name in ("triton", "cuda"):
        found = cr.available_backends().get(name)
        if found is not None and found.supports("materialize", CUDA):
            out.append(name)
    return out or pytest.skip("no Triton/CUDA backend on this device")


def test_plan_at_production_shape(setup):
    batch, _, plan, _, _ = setup
    assert plan.placement.num_gathered == 1024  # the shared prefix once, not 8 times
    assert plan.placement.block == 1024 // N
    assert plan.cur_rows.shape == (batch.num_tokens,)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_per_layer_step_matches_torch(setup, mode):
    _, geo, plan, table, t = setup
    want_scratch, want_index = _buffers(geo)
    want_local = t["pool"].clone()
    want_reads = _step(plan, table, t, want_scratch, want_index, want_local, "torch")
    for backend in _backends():
        scratch, index_scratch = _buffers(geo)
        local = t["pool"].clone()
        if mode == "eager":
            reads = _step(plan, table, t, scratch, index_scratch, local, backend)
        else:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up outside the graph (kernel compiles)
                _step(plan, table, t, scratch, index_scratch, local, backend)
            torch.cuda.current_stream().wait_stream(stream)
            scratch.zero_(), index_scratch.zero_(), local.copy_(t["pool"])
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                reads = _step(plan, table, t, scratch, index_scratch, local, backend)
            graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(scratch, want_scratch), backend
        assert torch.equal(index_scratch, want_index), backend
        # page 0 is SGLang's padding page: every non-owned current row lands there, in an
        # order index_copy_ does not fix (duplicate rows); it is never read
        assert torch.equal(local[1:], want_local[1:]), backend
        assert torch.equal(reads, want_reads), backend


def test_per_layer_step_does_not_sync(setup):
    _, geo, plan, table, t = setup
    scratch, index_scratch = _buffers(geo)
    local = t["pool"].clone()
    for backend in _backends():
        _step(plan, table, t, scratch, index_scratch, local, backend)  # compile first
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            _step(plan, table, t, scratch, index_scratch, local, backend)
        except RuntimeError as exc:
            if "synchroniz" in str(exc):
                pytest.fail(f"{backend}: the per-layer step synced with the host: {exc}")
            raise
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _syncs_in(fn) -> list[str]:
    """Where ``fn`` ran a synchronizing CUDA operation (debug mode ``warn``): one
    ``file:line`` per sync, of the frame that issued it (``warnings`` records the caller)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


def test_sync_counter_sees_one_read():
    """The counter the plan tests below use sees a read back, once per read: their 'exactly
    one' can fail."""
    t = torch.arange(4, device=CUDA)
    assert len(_syncs_in(lambda: (t.sum().item(), t.tolist()))) == 2


def test_plan_halves_do_not_sync(setup):
    """The two halves of the plan around its one read (the ``shard_plan`` op and what surrounds
    it; the checks after the read) never sync."""
    batch, geo, _, _, _ = setup
    r2t = batch.req_to_token().to(CUDA)
    idx = torch.arange(len(batch.pages), device=CUDA)
    oc = batch.out_cache_loc().to(CUDA)
    args = (r2t, idx, batch.prefix, batch.extend, oc, geo, N * (batch.local_pages + 1))
    draft = draft_forward(*args)  # warm
    numbers = draft.outputs[0].tolist()
    holder = []
    assert _syncs_in(lambda: holder.append(draft_forward(*args))) == []
    assert _syncs_in(lambda: finish_forward(holder[0], numbers, geo)) == []


@pytest.mark.parametrize("kept", [None, [0, 2, 5]])
def test_cuda_plan_equals_the_torch_plan(setup, kept):
    """The plan on the CUDA kernels equals the plan on ``cpkv_runtime``'s torch reference,
    tensor for tensor, at the production shape."""
    batch, geo, _, _, _ = setup
    r2t = batch.req_to_token().to(CUDA)
    idx = torch.arange(len(batch.pages), device=CUDA)
    args = (r2t, idx, batch.prefix, batch.seq, batch.out_cache_loc().to(CUDA), geo,
            N * (batch.local_pages + 1))  # fmt: skip
    got = plan_forward(*args, kept_rows=kept, ops=shard_ops(CUDA, "cuda"))
    want = plan_forward(*args, kept_rows=kept, ops=shard_ops(CUDA, "torch"))
    for name in ("token_req", "cur_rows", "local_rows"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    gp, wp = got.placement, want.placement
    assert (gp.block, gp.owned, gp.num_fresh) == (wp.block, wp.owned, wp.num_fresh)
    assert torch.equal(gp.slot_scratch, wp.slot_scratch)
    assert torch.equal(gp.send_pages, wp.send_pages)
    for field in ("req_pages", "slot_table", "slot_page", "slot_owner", "inverse"):
        assert torch.equal(getattr(gp.layout, field), getattr(wp.layout, field)), field
    assert got.row_req.keys() == want.row_req.keys()
    for n, rows in got.row_req.items():
        assert torch.equal(rows, want.row_req[n]), n


def test_forward_plan_syncs_once(setup):
    """The pool's per-forward path (``CpkvSharedKVPool._begin``): one read of the plan's host
    numbers, no other sync (the uploads of host values are pinned and non-blocking)."""
    batch, geo, _, _, _ = setup
    r2t = batch.req_to_token().to(CUDA)
    idx = torch.arange(len(batch.pages), device=CUDA)

    def forward_plan():
        oc = current_locs(r2t, idx, batch.prefix, batch.seq)
        return plan_forward(r2t, idx, batch.prefix, batch.seq, oc, geo, N * (batch.local_pages + 1))

    want = forward_plan()  # first call compiles and resolves the kernels
    syncs = _syncs_in(forward_plan)
    assert len(syncs) == 1, syncs  # the read of the host numbers, nothing else
    got = forward_plan()
    assert torch.equal(got.cur_rows, want.cur_rows)
    assert torch.equal(got.placement.slot_scratch, want.placement.slot_scratch)


def test_per_layer_lookups_do_not_sync(setup):
    """Every lookup a layer makes through the plan, and the pack kernel of the gather, under
    ``set_sync_debug_mode("error")`` (each table translated afresh, not from the cache)."""
    batch, geo, plan, _, t = setup
    r2t = batch.req_to_token().to(CUDA)
    table = r2t[:, : max(batch.seq)]
    pack = pack_launcher(CUDA)  # what CpkvSharedKVPool resolves once, at its first forward
    block = plan.placement.block
    send = torch.empty(block, P, LATENT, dtype=torch.uint8, device=CUDA)
    other = plan.out_cache_loc.clone()

    def layer():
        plan._cache.clear()
        plan.translate(table)
        plan.scratch_pages(table[:, ::P] // P)
        plan.write_rows(plan.out_cache_loc)
        plan.persist_rows(plan.out_cache_loc, geo)
        plan.persist_rows(other, geo)
        pack(t["pool"], plan.placement.send_pages, send)

    layer()  # compile first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        layer()
    except RuntimeError as exc:
        if "synchroniz" in str(exc):
            pytest.fail(f"a per-layer lookup synced with the host: {exc}")
        raise
    finally:
        torch.cuda.set_sync_debug_mode("default")
