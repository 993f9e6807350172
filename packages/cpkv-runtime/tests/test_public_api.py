"""The public surface is exactly __all__, and every name in it is documented."""

from __future__ import annotations

import inspect

import cpkv_runtime
import cpkv_runtime.errors

PUBLIC = {
    # Layout
    "Layout",
    "plan_layout",
    "current_tokens",
    # Ops
    "materialize",
    "fill_current",
    "remap_locs",
    "remap_positions",
    "current_page_mask",
    "gather_pages",
    # Per-forward planning and the per-layer sequence
    "plan_layout_static",
    "prepare_layer_step",
    "LayerStep",
    # Context parallelism
    "CPSplit",
    "cp_split",
    "gather_order",
    "localize",
    # Checks
    "check_invariants",
    # Backends
    "Backend",
    "NO_TRITON",
    "OP_NAMES",
    "PRIORITY",
    "available_backends",
    "register_backend",
    "resolve_backend",
    # Errors
    "CpkvError",
    "LayoutError",
    "InvariantError",
    "BuildError",
    "BackendWarning",
}


def test_all_is_the_public_surface():
    assert set(cpkv_runtime.__all__) == PUBLIC
    assert len(cpkv_runtime.__all__) == len(PUBLIC)
    public_attrs = {n for n in vars(cpkv_runtime) if not n.startswith("_")}
    assert public_attrs - PUBLIC == {"errors"}  # the errors module itself is public


def test_every_public_callable_has_a_docstring():
    for name in cpkv_runtime.__all__:
        obj = getattr(cpkv_runtime, name)
        if callable(obj):
            assert inspect.getdoc(obj), name


def test_error_tree():
    from cpkv_runtime import BuildError, CpkvError, InvariantError, LayoutError

    assert issubclass(LayoutError, CpkvError) and issubclass(LayoutError, ValueError)
    assert issubclass(InvariantError, CpkvError) and issubclass(InvariantError, RuntimeError)
    assert issubclass(BuildError, CpkvError) and issubclass(BuildError, RuntimeError)
    assert set(cpkv_runtime.errors.__all__) == {
        "CpkvError",
        "LayoutError",
        "InvariantError",
        "BuildError",
        "BackendWarning",
    }


def test_backend_contract_names():
    assert cpkv_runtime.OP_NAMES == (
        "build_inverse",
        "materialize",
        "fill_current",
        "remap_locs",
        "current_page_mask",
        "plan_slots",
        "fill_sources",
        "build_dense",
        "layer_step",
        "shard_plan",
    )
    assert set(cpkv_runtime.NO_TRITON) == {"shard_plan"}
    assert cpkv_runtime.PRIORITY == ("cuda", "triton", "torch")
    torch_backend = cpkv_runtime.available_backends()["torch"]
    assert set(torch_backend.ops) == set(cpkv_runtime.OP_NAMES)
