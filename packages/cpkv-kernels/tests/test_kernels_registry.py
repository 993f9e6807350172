"""The backends as cpkv_runtime sees them: entry points, availability, dispatch order, fallback."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution, entry_points

import cpkv_kernels
import cpkv_runtime
import pytest
import torch
from _cases import make_data, named_batches
from _compare import assert_bitwise_equal
from cpkv_runtime import NO_TRITON, OP_NAMES, Backend


def test_entry_points_name_the_factories():
    try:
        distribution("cpkv-kernels")
    except PackageNotFoundError:
        pytest.skip("cpkv-kernels is not installed (a PYTHONPATH checkout has no entry points)")
    eps = {ep.name: ep.value for ep in entry_points(group="cpkv_runtime.backends")}
    assert eps.get("triton") == "cpkv_kernels._registry:triton_backend"
    assert eps.get("cuda") == "cpkv_kernels._registry:cuda_backend"


def test_triton_backend_implements_every_op_but_the_host_time_ops(device):
    backend = cpkv_kernels.triton_backend()
    assert isinstance(backend, Backend) and backend.available, backend.reason
    assert set(backend.ops) == set(OP_NAMES) - NO_TRITON
    assert {"shard_plan"} == NO_TRITON
    assert device in backend.devices  # cpu only when the kernels are interpreted


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_cuda_backend_without_a_gpu_says_why():
    backend = cpkv_kernels.cuda_backend()
    assert not backend.available and backend.reason == "no CUDA device is visible"


def test_runtime_dispatches_here_and_honours_overrides(device, monkeypatch):
    cpkv_kernels.register()
    cpu_or_gpu = torch.device(device)
    want = "cuda" if device == "cuda" else "triton"
    assert cpkv_runtime._dispatch.resolve("remap_locs", cpu_or_gpu).name == want
    monkeypatch.setenv("CPKV_BACKEND", "torch")
    assert cpkv_runtime._dispatch.resolve("remap_locs", cpu_or_gpu).name == "torch"
    assert cpkv_runtime._dispatch.resolve("remap_locs", cpu_or_gpu, "triton").name == "triton"


def test_runtime_public_ops_match_across_backends(device):
    """The runtime's public API with backend= forced, on an adversarial batch."""
    cpkv_kernels.register()
    d = make_data(named_batches(16)[1], "656B", device)
    results = {}
    for name in ("torch", "triton"):
        lay = cpkv_runtime.plan_layout(
            d.layout.req_pages,
            d.layout.prefix_lens,
            d.layout.extend_lens,
            16,
            d.layout.num_pages,
            backend=name,
        )
        dense = cpkv_runtime.materialize(d.kv_pool, lay, backend=name)
        cpkv_runtime.fill_current(
            dense, d.current_kv, d.token_req, d.out_cache_loc, lay, backend=name
        )
        cpkv_runtime.check_invariants(
            lay, d.kv_pool, dense, d.current_kv, d.token_req, d.out_cache_loc
        )
        results[name] = (
            lay.inverse,
            dense,
            cpkv_runtime.remap_locs(d.locs, d.req_id, lay, backend=name),
        )
    for a, b, what in zip(
        results["torch"], results["triton"], ("inverse", "dense", "remap"), strict=True
    ):
        assert_bitwise_equal(what, b, a, 2, "index")
