"""Backend registry: lazy once-only discovery, cuda > triton > torch, CPKV_BACKEND, backend=."""

from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint

import _backends_for_tests as tb
import cpkv_runtime as cr
import pytest
import torch
from _scenarios import SCENARIOS
from cpkv_runtime import _dispatch

CPU = torch.device("cpu")


def ep(attr: str, name: str | None = None) -> EntryPoint:
    return EntryPoint(name=name or attr, value=f"_backends_for_tests:{attr}", group=_dispatch.GROUP)


def registry(*attrs: str) -> _dispatch.Registry:
    return _dispatch.Registry([ep(a) for a in attrs])


def test_discovery_is_lazy_and_runs_once():
    tb.LOADS.clear()
    reg = registry("cuda_on_cpu")
    assert tb.LOADS["cuda_on_cpu"] == 0  # nothing loaded at construction
    reg.resolve("materialize", CPU)
    reg.resolve("remap_locs", CPU)
    reg.backends()
    assert tb.LOADS["cuda_on_cpu"] == 1


@pytest.mark.parametrize(
    ("attr", "why"),
    [
        ("broken", "RuntimeError: libcuda.so.1: cannot open shared object file"),
        ("not_a_backend", "TypeError: register expects a cpkv_runtime.Backend"),
        ("no_such_factory", "AttributeError"),
    ],
)
def test_a_failing_entry_point_warns_once_and_is_skipped(attr, why):
    reg = registry(attr, "triton_on_cpu")
    with pytest.warns(cr.BackendWarning, match=f"backend entry point '{attr}'.*{why}") as rec:
        assert reg.resolve("materialize", CPU).name == "triton"
    assert len(rec) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg.resolve("materialize", CPU)  # no second warning


def test_a_missing_module_warns_and_is_skipped():
    reg = _dispatch.Registry([EntryPoint("cuda", "no_such_module_xyz:factory", _dispatch.GROUP)])
    with pytest.warns(cr.BackendWarning, match="ModuleNotFoundError"):
        assert reg.resolve("fill_current", CPU).name == "torch"


def test_priority_cuda_then_triton_then_torch():
    reg = registry("triton_on_cpu", "cuda_on_cpu")
    assert reg.resolve("materialize", CPU).name == "cuda"
    reg = registry("triton_on_cpu", "cuda_without_remap")
    assert reg.resolve("materialize", CPU).name == "cuda"
    assert reg.resolve("remap_locs", CPU).name == "triton"  # missing op falls through
    reg = registry("triton_gpu_only", "cuda_unavailable")
    assert reg.resolve("materialize", CPU).name == "torch"  # by device and availability


def test_env_forces_a_backend(monkeypatch):
    reg = registry("triton_on_cpu", "cuda_on_cpu")
    for name in ("torch", "triton", "cuda"):
        monkeypatch.setenv("CPKV_BACKEND", name)
        assert reg.resolve("materialize", CPU).name == name
    monkeypatch.setenv("CPKV_BACKEND", " AUTO ")
    assert reg.resolve("materialize", CPU).name == "cuda"
    monkeypatch.setenv("CPKV_BACKEND", "fastest")
    with pytest.raises(cr.LayoutError, match="CPKV_BACKEND='fastest': expected auto, torch"):
        reg.resolve("materialize", CPU)


def test_per_call_backend_overrides_env(monkeypatch):
    reg = registry("triton_on_cpu", "cuda_on_cpu")
    monkeypatch.setenv("CPKV_BACKEND", "cuda")
    assert reg.resolve("materialize", CPU, "triton").name == "triton"
    assert reg.resolve("materialize", CPU, "auto").name == "cuda"


@pytest.mark.parametrize(
    ("attrs", "forced", "why"),
    [
        (("cuda_unavailable",), "cuda", "cuda is unavailable: no CUDA device is visible"),
        (("triton_gpu_only",), "triton", "triton does not run on cpu tensors"),
        (("cuda_without_remap",), "cuda", "cuda does not implement remap_locs"),
        ((), "triton", "no 'triton' backend is registered"),
    ],
)
def test_forced_but_unavailable_falls_back_with_one_warning(monkeypatch, attrs, forced, why):
    reg = registry(*attrs)
    monkeypatch.setenv("CPKV_BACKEND", forced)
    with pytest.warns(cr.BackendWarning, match=f"CPKV_BACKEND={forced} was requested but {why}"):
        assert reg.resolve("remap_locs", CPU).name == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reg.resolve("remap_locs", CPU).name == "torch"  # warned once only


def test_forcing_torch_skips_plugin_discovery():
    tb.LOADS.clear()
    reg = registry("cuda_on_cpu")
    assert reg.resolve("materialize", CPU, "torch").name == "torch"
    assert tb.LOADS["cuda_on_cpu"] == 0


def test_public_ops_dispatch_through_the_registry(monkeypatch):
    reg = registry("triton_on_cpu", "cuda_on_cpu")
    monkeypatch.setattr(_dispatch, "_REGISTRY", reg)
    tb.CALLS.clear()
    batch = SCENARIOS["cache_miss_mixed"]
    layout = batch.plan(backend="triton")
    pool = torch.zeros(batch.num_pages, batch.page_size, 2)
    dense = cr.materialize(pool, layout)
    token_req, _, loc = cr.current_tokens(layout)
    cr.fill_current(
        dense, torch.ones(layout.num_tokens, 2), token_req, loc, layout, backend="torch"
    )
    cr.remap_locs(loc.view(-1, 1), token_req, layout, backend="triton")
    monkeypatch.setenv("CPKV_BACKEND", "triton")
    cr.current_page_mask(layout)
    assert tb.CALLS == {
        ("triton", "build_inverse"): 1,
        ("cuda", "materialize"): 1,
        ("triton", "remap_locs"): 1,
        ("triton", "current_page_mask"): 1,
    }


def test_extra_backends_from_env(monkeypatch):
    monkeypatch.setenv("CPKV_EXTRA_BACKENDS", "_backends_for_tests:cuda_on_cpu, ")
    reg = _dispatch.Registry()
    assert reg.resolve("materialize", CPU, "cuda").name == "cuda"


def test_malformed_extra_backends_warn_once_and_load_nothing(monkeypatch):
    """Parsed by its declaration (what a command refuses at start); the library skips it, as
    it skips a failing entry point."""
    monkeypatch.setenv("CPKV_EXTRA_BACKENDS", "_backends_for_tests.cuda_on_cpu")  # no ':'
    tb.LOADS.clear()
    reg = _dispatch.Registry()
    with pytest.warns(cr.BackendWarning, match="CPKV_EXTRA_BACKENDS='_backends_for_tests.cuda_"):
        reg.discover()
    assert tb.LOADS["cuda_on_cpu"] == 0


def test_backend_choices_are_the_declared_ones():
    """``CPKV_BACKEND``'s declaration (``cpkv_cli.environment``) accepts exactly CHOICES."""
    from cpkv_cli.environment import CPKV_BACKEND

    for name in _dispatch.CHOICES:
        assert CPKV_BACKEND.read({"CPKV_BACKEND": name.upper()}) == name
    assert set(CPKV_BACKEND.accepts.replace(" or", ",").split(", ")) == set(_dispatch.CHOICES)


def test_register_rejects_bad_backends():
    reg = _dispatch.Registry([])
    with pytest.raises(TypeError, match=r"expects a cpkv_runtime\.Backend"):
        reg.register("cuda")
    with pytest.raises(cr.LayoutError, match="implements unknown ops \\['fuse'\\]"):
        reg.register(cr.Backend("cuda", ops={"fuse": print}))
    with pytest.raises(cr.LayoutError, match="unknown op 'fuse'"):
        reg.resolve("fuse", CPU)


def test_backend_supports():
    b = tb.counting("cuda", ops=["materialize"], devices=("cuda",))
    assert b.supports("materialize", torch.device("cuda", 0))
    assert not b.supports("materialize", CPU)
    assert not b.supports("remap_locs", torch.device("cuda"))
    off = tb.counting("cuda", available=False, devices=("cuda",))
    assert not off.supports("materialize", torch.device("cuda"))


def test_register_backend_process_wide(monkeypatch):
    monkeypatch.setattr(_dispatch, "_REGISTRY", _dispatch.Registry([]))
    cr.register_backend(tb.counting("triton"))
    assert set(cr.available_backends()) == {"torch", "triton"}


def test_resolve_backend_is_what_a_call_dispatches_to(monkeypatch):
    monkeypatch.setattr(_dispatch, "_REGISTRY", _dispatch.Registry([]))
    cr.register_backend(tb.counting("triton"))
    assert cr.resolve_backend("materialize", CPU).name == "triton"
    monkeypatch.setenv("CPKV_BACKEND", "torch")
    assert cr.resolve_backend("materialize", CPU).name == "torch"
    assert cr.resolve_backend("materialize", CPU, backend="triton").name == "triton"
    op = cr.resolve_backend("materialize", CPU, backend="triton").ops["materialize"]
    pool = torch.arange(24).view(4, 2, 3)
    out = torch.empty(2, 2, 3, dtype=pool.dtype)
    op(pool, torch.tensor([3, 1]), out)
    assert torch.equal(out, pool[[3, 1]]) and tb.CALLS[("triton", "materialize")] >= 1
