"""GPU: the parity sweep CUDA == Triton == torch (bitwise), opcheck on the CUDA ops, and CUDA-graph
capture and replay of the whole layout -> materialise -> fill -> remap sequence.

Run on an H200: ``python3 -m pytest packages/cpkv-kernels/tests -m gpu``.
"""

from __future__ import annotations

import random

import cpkv_runtime
import pytest
import torch
from _cases import make_data, random_batch
from _compare import assert_bitwise_equal
from cpkv_runtime import OP_NAMES
from test_kernels_opcheck import _args
from test_kernels_parity import _check_all

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("row", ["1152B", "656B", "132B"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("bsz", [1, 3, 4, 8, 32])
def test_parity_sweep(bsz, page_size, row, share, impls, torch_ops):
    """CUDA == Triton == torch, bitwise, for every op on one random batch of this shape."""
    assert set(impls) == {"triton", "cuda"}
    rng = random.Random(f"{bsz}-{page_size}-{row}-{share}")
    max_seq = rng.choice([3 * page_size + 7, 40 * page_size + 3])
    batch = random_batch(rng, bsz, page_size, share, max_seq=min(max_seq, 4000))
    data = make_data(batch, row, "cuda", topk=rng.choice([8, 64, 2048]))
    for name, ops in impls.items():
        _check_all(ops, torch_ops, data, f"{name} B={bsz} P={page_size} {row} share={share}")


@pytest.mark.parametrize("op", OP_NAMES)
def test_opcheck_cuda(op, impls):
    torch.library.opcheck(getattr(torch.ops.cpkv, f"{op}_cuda").default, _args("cuda", "cuda")[op])


def _sequence(ops, s: dict[str, torch.Tensor], p: int) -> None:
    """Every kernel of one prefill step, writing into preallocated outputs only."""
    s["inverse"].copy_(ops["build_inverse"](s["slot_table"], s["req_pages"], s["inverse"].shape[1]))
    ops["materialize"](s["kv_pool"], s["slot_page"], s["dense"])
    ops["fill_current"](s["dense"], s["current_kv"], s["token_req"], s["loc"], s["inverse"], p)
    ops["remap_locs"](s["locs"], s["req_id"], s["inverse"], p, s["mapped"])
    ops["remap_locs"](s["loc"], s["token_req"], s["inverse"], p, s["mapped_1d"])
    s["mask"].copy_(ops["current_page_mask"](s["req_pages"], s["prefix"], s["extend"], p))


@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_cuda_graph_capture_and_replay(impl, impls, torch_ops):
    """Capture once, replay on new pool/current/top-k contents: same bytes as eager torch."""
    rng = random.Random(7)
    batch = random_batch(rng, 8, 64, 0.5, max_seq=3000)
    data = make_data(batch, "656B", "cuda", topk=2048)
    lay, p = data.layout, data.layout.page_size
    s = {
        "slot_table": lay.slot_table,
        "req_pages": lay.req_pages,
        "slot_page": lay.slot_page,
        "kv_pool": data.kv_pool,
        "current_kv": data.current_kv,
        "token_req": data.token_req,
        "loc": data.out_cache_loc,
        "locs": data.locs,
        "req_id": data.req_id,
        "prefix": lay.prefix_lens,
        "extend": lay.extend_lens,
        "inverse": torch.empty_like(lay.inverse),
        "dense": torch.empty((lay.num_slots, p, 656), dtype=torch.uint8, device="cuda"),
        "mapped": torch.empty_like(data.locs),
        "mapped_1d": torch.empty(data.out_cache_loc.shape, dtype=torch.int32, device="cuda"),
        "mask": torch.empty(lay.req_pages.shape, dtype=torch.bool, device="cuda"),
    }
    ops = impls[impl]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _sequence(ops, s, p)  # warm up: compile/load outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _sequence(ops, s, p)
    for step in range(3):
        s["kv_pool"].copy_(torch.randint_like(s["kv_pool"], 0, 256))
        s["current_kv"].copy_(torch.randint_like(s["current_kv"], 0, 256))
        s["locs"].copy_(
            torch.where(
                torch.rand_like(s["locs"], dtype=torch.float) < 0.1, -1, s["locs"].roll(step + 1, 1)
            )
        )
        graph.replay()
        torch.cuda.synchronize()
        want = {}
        want["inverse"] = torch_ops["build_inverse"](s["slot_table"], s["req_pages"], lay.num_pages)
        want["dense"] = torch_ops["materialize"](s["kv_pool"], s["slot_page"])
        torch_ops["fill_current"](
            want["dense"], s["current_kv"], s["token_req"], s["loc"], want["inverse"], p
        )
        want["mapped"] = torch_ops["remap_locs"](s["locs"], s["req_id"], want["inverse"], p)
        want["mapped_1d"] = torch_ops["remap_locs"](s["loc"], s["token_req"], want["inverse"], p)
        want["mask"] = torch_ops["current_page_mask"](s["req_pages"], s["prefix"], s["extend"], p)
        for k in ("inverse", "dense", "mapped", "mapped_1d", "mask"):
            assert_bitwise_equal(
                f"{impl} replay {step} {k}", s[k], want[k], min(s[k].dim(), 2), "index"
            )


def test_runtime_dispatch_prefers_cuda():
    import cpkv_kernels

    cpkv_kernels.register()
    assert cpkv_runtime._dispatch.resolve("materialize", torch.device("cuda")).name == "cuda"
