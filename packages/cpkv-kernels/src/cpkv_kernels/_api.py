"""Backend-contract callables over the ``cpkv::<op>_<impl>`` custom ops, one generic wrapper.

Every op's signature, metadata checks and output allocation come from the contract
(``cpkv_runtime._contract.OP_SPECS``); what is written here is only how an argument reaches a
kernel (index widths, contiguity). A wrapper checks metadata (never values: no host sync),
allocates the outputs a caller left out and calls the custom op, which writes into them (the
per-forward ``plan_slots`` and ``fill_sources`` return new tensors). Nothing here syncs, so the
calls capture in CUDA graphs; the custom ops have fake kernels, so they trace under
``torch.compile``. ``make_raw_ops`` gives the forward path the same ops without the checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from cpkv_runtime._contract import OP_SPECS, Args, OpSpec, lengths_dtype

from ._plan_workspace import plan_outputs, workspace_size
from .errors import KernelInputError

_WIDE = (torch.int32, torch.int64)
# The ops whose bare CUDA launcher is the torch.ops overload itself (C++ checks only).
_RAW_CUDA = (
    "materialize", "fill_current", "remap_locs", "plan_slots", "fill_sources", "build_dense",
    "layer_step", "shard_plan",
)  # fmt: skip
#: request and slot indices: int32 for the CUDA kernels (int64 narrowed: an allocation), int32
#: or int64 for Triton
_REQUEST_INDEX = frozenset({"slot_table", "slot_page", "token_req", "req_id", "row_req"})
#: pool locations: int32 or int64 on both
_LOCATIONS = frozenset({"out_cache_loc", "locs"})
#: ``req_pages`` is a request index of ``build_inverse`` and a location table of ``plan_slots``;
#: ``current_page_mask`` reads its shape only
_REQ_PAGES = {"build_inverse": "index", "plan_slots": "wide"}


def _index(t: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> torch.Tensor:
    """``t`` contiguous and of an allowed dtype (narrow integer dtypes widen to int32)."""
    if t.dtype not in allowed:
        t = t.to(torch.int32)
    return t.contiguous()


def _converter(op: str, name: str, impl: str) -> Callable[[Any, Args], Any] | None:
    """How argument ``name`` of ``op`` reaches the ``impl`` kernel; None: as given."""
    index = (torch.int32,) if impl == "cuda" else _WIDE
    kind = _REQ_PAGES.get(op, "as given") if name == "req_pages" else None
    if name in _REQUEST_INDEX or kind == "index":
        return lambda t, a: _index(t, index)
    if name in _LOCATIONS or kind == "wide":
        return lambda t, a: _index(t, _WIDE)
    if name in ("prefix_lens", "extend_lens"):  # one dtype for both (the kernels read one)
        return lambda t, a: t.to(lengths_dtype(a.prefix_lens)).contiguous()
    if name in ("inverse", "sources"):
        return lambda t, a: t.contiguous()
    if name == "used_slots":
        return lambda t, a: None if t is None else t.reshape(1).contiguous()
    if name == "dedup":
        return lambda t, a: bool(t)
    return None


def _wrap(spec: OpSpec, kernel: Callable[..., Any], impl: str) -> Callable[..., Any]:
    """The contract op ``spec`` over ``kernel`` (which takes the schema's arguments)."""
    names = spec.params
    convert = [(n, _converter(spec.name, n, impl)) for n in names]
    allocates = tuple(spec.allocates.items())
    returned = allocates[0][0] if allocates else None

    def op(*args: Any, **kwargs: Any) -> Any:
        a = spec.bind(args, kwargs)
        spec.check_args(a, KernelInputError)
        for name, allocate in allocates:
            if getattr(a, name) is None:
                setattr(a, name, allocate(a))
        # getattr, not a[name]: one builtin call instead of a Python frame per argument
        result = kernel(*[getattr(a, n) if c is None else c(getattr(a, n), a) for n, c in convert])
        return getattr(a, returned) if returned else result

    op.__name__ = op.__qualname__ = spec.name
    op.__doc__ = f"``{spec.name}{spec.schema}`` on the {impl} kernels (``cpkv_runtime._backend``)."
    return op


def make_ops(impl: str) -> dict[str, Callable[..., object]]:
    """The contract ops (``cpkv_runtime.OP_NAMES``) dispatching to ``torch.ops.cpkv.<op>_<impl>``.

    Args:
        impl: ``"triton"`` or ``"cuda"``. The CUDA ops take int32 request/slot indices (int64
            ones are narrowed, an allocation); the Triton ops take int32 or int64.
    """
    ns = torch.ops.cpkv
    ops: dict[str, Callable[..., object]] = {}
    for name, spec in OP_SPECS.items():
        if name == "shard_plan":  # no Triton kernel (cpkv_runtime.NO_TRITON); the C++ op checks
            if impl == "cuda":
                ops[name] = ns.shard_plan_cuda.default
            continue
        kernel = getattr(ns, f"{name}_{impl}").default  # the overload: no lookup per call
        if name == "plan_slots" and impl == "triton":  # CUDA: one C++ call allocates and launches
            kernel = _plan_triton(kernel)
        ops[name] = _wrap(spec, kernel, impl)
    return ops


def _plan_triton(op: Callable[..., object]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A planner over ``op`` (the Triton custom op or its bare launcher): one workspace for the
    outputs, one for the inverse plus its scratch row, the contract tuple as views of them."""

    def plan(*args: Any) -> tuple[torch.Tensor, ...]:
        req_pages, num_pages, max_slots = args[0], args[4], args[5]
        bsz, width = req_pages.shape
        device = req_pages.device
        workspace = torch.empty(
            workspace_size(bsz, width, max_slots), dtype=torch.int32, device=device
        )
        inverse = torch.empty((bsz + 1, num_pages), dtype=torch.int32, device=device)
        op(*args, workspace, inverse)
        return plan_outputs(workspace, inverse, bsz, width, max_slots)

    return plan


def make_raw_ops(impl: str) -> dict[str, Callable[..., object]]:
    """The bare launchers (``cpkv_runtime.Backend.raw_ops``) of the ops that the forward path
    calls once its arguments are checked: no checks, no conversion, outputs passed in. CUDA:
    the ``torch.ops`` overloads (C++ checks only); Triton: the launchers under the custom ops."""
    if impl == "cuda":
        ns = torch.ops.cpkv
        return {op: getattr(ns, f"{op}_cuda").default for op in _RAW_CUDA}
    from .ops import (
        build_dense,
        fill_current,
        fill_sources,
        layer_step,
        materialize,
        plan_slots,
        remap_locs,
    )

    return {
        "materialize": materialize.launch_materialize,
        "fill_current": fill_current.launch_fill_current,
        "remap_locs": remap_locs.launch_remap_locs,
        "fill_sources": fill_sources.launch_fill_sources,
        "build_dense": build_dense.launch_build_dense,
        "layer_step": layer_step.launch_layer_step,
        "plan_slots": _plan_triton(plan_slots.launch_plan_slots),
    }
