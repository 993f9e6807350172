"""CUDA: the shared-KV per-layer sequence at production shapes, eager and CUDA-graph captured,
bitwise against a full replica; the per-layer kernels and lookups never sync with the host.

Production shape: GLM-5.1 on one CP-8 rank, 8 requests sharing a 65,536-token prefix plus 2,048
new tokens each, page 64, packed fp8 latent rows (656 B) and indexer pages (8,448 B). Every
rank's pool is a stripe of one logical pool (``full[q::N]``). The per-layer step launches what
``CpkvSharedKVPool`` launches per layer: each rank packs its owned pages with the page copy's
bare launcher (``shared_kv.pack_launcher``) into its all-gather block (on one GPU every block is
packed in place: what the all-gather would assemble), the two stores of the current rows at
precomputed rows (``index_copy_``: SGLang's own store kernel in the pool), and the reads through
the page table translated once per forward. Reference: what a full replica holds (history rows
from the logical pool, the request's own current rows), with a planted swap of two current rows
as the negative control. The whole per-forward plan (``current_locs``, ``plan_forward``) syncs
with the host exactly once (its one read), its CUDA ops equal the torch reference's, and the
per-layer lookups of the plan never (``torch.cuda.set_sync_debug_mode``;
``test_shared_kv_syncs.py`` shows the same on CPU with meta tensors).

Run on the H200: ``uv run --frozen pytest packages/sglang-integration/tests/test_shared_kv_gpu.py
-q -m gpu``.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import cpkv_runtime as cr
import pytest
import torch
from _skv_shapes import P, Req, place
from sglang_cpkv.plugin.shared_kv import (
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
    """The batch, rank RANK's geometry and plan, its translated table, and the pools: one
    logical full-replica pool (what every rank's stripe is cut from), the current rows."""
    torch.manual_seed(0)
    batch = place("production", [Req("A", 65536, 2048) for _ in range(8)], N)
    num_pages = N * (batch.local_pages + 1)
    geo = ScratchGeometry(P, N, RANK, gather_pages=8 * 1024 * 8 // N * N, write_pages=8 * 40)
    r2t = batch.req_to_token().to(CUDA)
    idx = torch.arange(len(batch.pages), device=CUDA)
    plan = plan_forward(r2t, idx, batch.prefix, batch.seq, batch.out_cache_loc().to(CUDA), geo,
                        num_pages)  # fmt: skip
    table = plan.translate(r2t[:, : max(batch.seq)])

    def random_bytes(*shape: int) -> torch.Tensor:
        return torch.randint(0, 256, shape, dtype=torch.uint8, device=CUDA)

    full = random_bytes(num_pages, P, LATENT)  # logical page l lives on rank l % N at l // N
    full_index = random_bytes(num_pages, INDEX)
    t = {
        "full": full,
        "full_index": full_index,
        "pools": [full[q::N].contiguous() for q in range(N)],  # rank q's stripe
        "index_pools": [full_index[q::N].contiguous() for q in range(N)],
        "current": random_bytes(batch.num_tokens, LATENT),
    }
    t["pool"] = t["pools"][RANK]
    return batch, geo, plan, table, t


@pytest.fixture(scope="module")
def plans(setup):
    """Every rank's plan of the batch (rank RANK's is the fixture's)."""
    batch, geo, plan, _, _ = setup
    r2t = batch.req_to_token().to(CUDA)
    idx = torch.arange(len(batch.pages), device=CUDA)
    oc = batch.out_cache_loc().to(CUDA)
    num_pages = N * (batch.local_pages + 1)

    def plan_of(q: int):
        geo_q = replace(geo, shard_rank=q)
        return plan_forward(r2t, idx, batch.prefix, batch.seq, oc, geo_q, num_pages)

    return [plan if q == RANK else plan_of(q) for q in range(N)]


def _layer(plans, table, t, scratch, index_scratch, local, pack, cur_rows=None):
    """One layer of the shared-KV path on rank RANK: every rank ``q`` packs the pages it owns
    (its plan's ``send_pages``, from its stripe) into block ``q`` of the gather region with the
    page copy's bare launcher (one GPU has no peers: this is what the all-gather assembles);
    the current rows are staged at ``cur_rows`` (the plan's) and persisted at the plan's
    ``local_rows`` (``index_copy_`` stands in for SGLang's store kernel); the reads go through
    the table translated once per forward."""
    plan = plans[RANK]
    block = plan.placement.block
    for q, plan_q in enumerate(plans):
        mine = slice(q * block, (q + 1) * block)
        pack(t["pools"][q], plan_q.placement.send_pages, scratch[mine])
        pack(t["index_pools"][q], plan_q.placement.send_pages, index_scratch[mine])
    rows = scratch.view(-1, LATENT)
    rows.index_copy_(0, plan.cur_rows if cur_rows is None else cur_rows, t["current"])
    local.view(-1, LATENT).index_copy_(0, plan.local_rows, t["current"])
    return rows[table]


def _check_against_the_replica(batch, plan, t, reads, index_scratch, local) -> None:
    """What a full replica gives: request ``b`` reads the logical pool's rows at its history
    positions and its own current rows after them; its history pages of indexer keys are the
    pool's pages; this rank's stripe holds the pool with the current rows written."""
    r2t = batch.req_to_token().to(CUDA).long()
    full_rows = t["full"].view(-1, LATENT)
    pages = plan.scratch_pages(r2t[:, ::P] // P)
    first = 0
    for b, (prefix, seq) in enumerate(zip(batch.prefix, batch.seq, strict=True)):
        want = torch.cat([full_rows[r2t[b, :prefix]], t["current"][first : first + seq - prefix]])
        assert torch.equal(reads[b, :seq], want), f"request {b}"
        history = prefix // P
        got_index = index_scratch[pages[b, :history]]
        assert torch.equal(got_index, t["full_index"][r2t[b, : history * P : P] // P]), b
        first += seq - prefix
    after = t["full"].clone()
    after.view(-1, LATENT)[batch.out_cache_loc().to(CUDA)] = t["current"]
    # local page 0 is SGLang's padding page: every non-owned current row lands there, in an
    # order index_copy_ does not fix (duplicate rows); it is never read
    assert torch.equal(local[1:], after[RANK::N][1:])


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


def _run_layer(mode, plans, table, t, geo, pack, cur_rows=None):
    """``_layer`` eagerly, or captured in a CUDA graph and replayed on fresh buffers."""
    scratch, index_scratch = _buffers(geo)
    local = t["pool"].clone()
    if mode == "eager":
        reads = _layer(plans, table, t, scratch, index_scratch, local, pack, cur_rows)
    else:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (kernel compiles)
            _layer(plans, table, t, scratch, index_scratch, local, pack, cur_rows)
        torch.cuda.current_stream().wait_stream(stream)
        scratch.zero_(), index_scratch.zero_(), local.copy_(t["pool"])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            reads = _layer(plans, table, t, scratch, index_scratch, local, pack, cur_rows)
        graph.replay()
    torch.cuda.synchronize()
    return reads, index_scratch, local


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_per_layer_step_reads_the_full_replica(setup, plans, mode):
    """Every request reads what a full-replica pool holds, through each backend's page copy
    (the torch backend's checked op eagerly; the bare launchers also inside a CUDA graph)."""
    batch, geo, plan, table, t = setup
    assert all(p.placement.block == plan.placement.block for p in plans)  # one block size
    backends = _backends() + (["torch"] if mode == "eager" else [])
    for backend in backends:
        pack = pack_launcher(CUDA, backend)  # as CpkvSharedKVPool packs: the bare launcher
        reads, index_scratch, local = _run_layer(mode, plans, table, t, geo, pack)
        _check_against_the_replica(batch, plan, t, reads, index_scratch, local)


def test_swapped_current_rows_fail_the_replica_check(setup, plans):
    """Negative control: two current tokens of different requests staged at each other's rows
    (the plan's ``cur_rows`` with its first and last entries swapped) fail the check above."""
    batch, geo, plan, table, t = setup
    bad = plan.cur_rows.clone()
    bad[[0, -1]] = bad[[-1, 0]]
    pack = pack_launcher(CUDA, _backends()[0])
    reads, index_scratch, local = _run_layer("eager", plans, table, t, geo, pack, bad)
    with pytest.raises(AssertionError, match="request 0"):
        _check_against_the_replica(batch, plan, t, reads, index_scratch, local)


def test_per_layer_kernels_do_not_sync(setup, plans):
    """The kernels one layer launches (every rank's page-copy pack, the two ``index_copy_``
    stores, the read through the translated table) never sync with the host. This runs the
    kernels, not ``CpkvSharedKVPool``'s methods: the pool needs SGLang and a shard group (its
    real per-layer path runs under ``torch.distributed`` in ``test_shared_kv_distributed.py``
    and the multi-GPU suite); the plan's lookups are ``test_per_layer_lookups_do_not_sync``."""
    _, geo, _, table, t = setup
    scratch, index_scratch = _buffers(geo)
    local = t["pool"].clone()
    for backend in _backends():
        pack = pack_launcher(CUDA, backend)
        _layer(plans, table, t, scratch, index_scratch, local, pack)  # compile first
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            _layer(plans, table, t, scratch, index_scratch, local, pack)
        except RuntimeError as exc:
            if "synchroniz" in str(exc):
                pytest.fail(f"{backend}: the per-layer kernels synced with the host: {exc}")
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
    assert torch.equal(got.table_req, want.table_req)


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
