"""Backend-contract callables over the ``cpkv::<op>_<impl>`` custom ops.

Each function has the signature ``cpkv_runtime._backend`` documents, checks metadata (never
values: no host sync), allocates the output when none is passed, and calls the custom op, which
writes into it (the per-forward ``plan_slots`` and ``fill_sources`` return new tensors). Nothing
here syncs, so the calls capture in CUDA graphs; the custom ops have fake kernels, so they trace
under ``torch.compile``. ``make_raw_ops`` gives the forward path the same ops without the checks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import _checks
from ._plan_workspace import plan_outputs, workspace_size
from .errors import KernelInputError

_WIDE = (torch.int32, torch.int64)
# The ops whose bare CUDA launcher is the torch.ops overload itself (C++ checks only).
_RAW_CUDA = (
    "materialize", "fill_current", "remap_locs", "plan_slots", "fill_sources", "build_dense",
    "layer_step", "shard_plan",
)  # fmt: skip


def _index(t: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> torch.Tensor:
    """``t`` contiguous and of an allowed dtype (narrow integer dtypes widen to int32)."""
    if t.dtype not in allowed:
        t = t.to(torch.int32)
    return t.contiguous()


def make_ops(impl: str) -> dict[str, Callable[..., object]]:
    """The contract ops (``cpkv_runtime.OP_NAMES``) dispatching to ``torch.ops.cpkv.<op>_<impl>``.

    Args:
        impl: ``"triton"`` or ``"cuda"``. The CUDA ops take int32 request/slot indices (int64
            ones are narrowed, an allocation); the Triton ops take int32 or int64.
    """
    ns = torch.ops.cpkv
    bi, mat = getattr(ns, f"build_inverse_{impl}"), getattr(ns, f"materialize_{impl}")
    fill, remap = getattr(ns, f"fill_current_{impl}"), getattr(ns, f"remap_locs_{impl}")
    mask_op = getattr(ns, f"current_page_mask_{impl}")
    # CUDA: one C++ call allocates every output and launches; Triton: views of two workspaces.
    plan_op = ns.plan_slots_cuda.default if impl == "cuda" else _plan_triton(ns.plan_slots_triton)
    sources_op, build_op = getattr(ns, f"fill_sources_{impl}"), getattr(ns, f"build_dense_{impl}")
    step_op = getattr(ns, f"layer_step_{impl}")
    idx = (torch.int32,) if impl == "cuda" else _WIDE

    def build_inverse(
        slot_table: torch.Tensor, req_pages: torch.Tensor, num_pages: int
    ) -> torch.Tensor:
        _checks.check_build_inverse(slot_table, req_pages, num_pages)
        inverse = torch.empty(
            (slot_table.shape[0], num_pages), dtype=torch.int32, device=slot_table.device
        )
        bi(_index(slot_table, idx), _index(req_pages, idx), num_pages, inverse)
        return inverse

    def materialize(
        kv_pool: torch.Tensor, slot_page: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        _checks.check_materialize(kv_pool, slot_page, out)
        if out is None:
            out = kv_pool.new_empty((slot_page.shape[0], *kv_pool.shape[1:]))
        mat(kv_pool, _index(slot_page, idx), out)
        return out

    def fill_current(
        dense: torch.Tensor,
        current_kv: torch.Tensor,
        token_req: torch.Tensor,
        out_cache_loc: torch.Tensor,
        inverse: torch.Tensor,
        page_size: int,
    ) -> None:
        _checks.check_fill_current(dense, current_kv, token_req, out_cache_loc, inverse, page_size)
        fill(
            dense,
            current_kv,
            _index(token_req, idx),
            _index(out_cache_loc, _WIDE),
            inverse.contiguous(),
            page_size,
        )

    def remap_locs(
        locs: torch.Tensor,
        req_id: torch.Tensor,
        inverse: torch.Tensor,
        page_size: int,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        _checks.check_remap_locs(locs, req_id, inverse, page_size, out)
        if out is None:
            out = torch.empty(locs.shape, dtype=torch.int32, device=locs.device)
        remap(_index(locs, _WIDE), _index(req_id, idx), inverse.contiguous(), page_size, out)
        return out

    def current_page_mask(
        req_pages: torch.Tensor,
        prefix_lens: torch.Tensor,
        extend_lens: torch.Tensor,
        page_size: int,
    ) -> torch.Tensor:
        _checks.check_current_page_mask(req_pages, prefix_lens, extend_lens, page_size)
        mask = torch.empty(req_pages.shape, dtype=torch.bool, device=req_pages.device)
        lens = (prefix_lens.dtype,) if prefix_lens.dtype in _WIDE else (torch.int32,)
        mask_op(req_pages, _index(prefix_lens, lens), _index(extend_lens, lens), page_size, mask)
        return mask

    def plan_slots(
        req_pages: torch.Tensor,
        prefix_lens: torch.Tensor,
        extend_lens: torch.Tensor,
        page_size: int,
        num_pages: int,
        max_slots: int,
        dedup: bool,
    ) -> tuple[torch.Tensor, ...]:
        _checks.check_plan_slots(
            req_pages, prefix_lens, extend_lens, page_size, num_pages, max_slots
        )
        lens = (prefix_lens.dtype,) if prefix_lens.dtype in _WIDE else (torch.int32,)
        return plan_op(
            _index(req_pages, _WIDE),
            _index(prefix_lens, lens),
            _index(extend_lens, lens),
            page_size,
            num_pages,
            max_slots,
            bool(dedup),
        )

    def fill_sources(
        token_req: torch.Tensor,
        out_cache_loc: torch.Tensor,
        inverse: torch.Tensor,
        page_size: int,
        num_slots: int,
    ) -> torch.Tensor:
        _checks.check_fill_sources(token_req, out_cache_loc, inverse, page_size, num_slots)
        return sources_op(
            _index(token_req, idx),
            _index(out_cache_loc, _WIDE),
            inverse.contiguous(),
            page_size,
            num_slots,
        )

    def _dense_args(kv_pool, slot_page, current_kv, sources, used_slots, out) -> tuple:
        _checks.check_build_dense(kv_pool, slot_page, current_kv, sources, used_slots, out)
        used = None if used_slots is None else used_slots.reshape(1).contiguous()
        return kv_pool, _index(slot_page, idx), current_kv, sources.contiguous(), used, out

    def build_dense(
        kv_pool: torch.Tensor,
        slot_page: torch.Tensor,
        current_kv: torch.Tensor,
        sources: torch.Tensor,
        used_slots: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        build_op(*_dense_args(kv_pool, slot_page, current_kv, sources, used_slots, out))

    def layer_step(
        kv_pool: torch.Tensor,
        slot_page: torch.Tensor,
        current_kv: torch.Tensor,
        sources: torch.Tensor,
        used_slots: torch.Tensor | None,
        dense: torch.Tensor,
        locs: torch.Tensor,
        row_req: torch.Tensor,
        inverse: torch.Tensor,
        page_size: int,
        dense_locs: torch.Tensor,
    ) -> None:
        dense_args = _dense_args(kv_pool, slot_page, current_kv, sources, used_slots, dense)
        _checks.check_remap_locs(locs, row_req, inverse, page_size, dense_locs)
        if dense.shape[1] != page_size:
            raise KernelInputError(
                f"page_size = {page_size} but dense pages hold {dense.shape[1]} rows"
            )
        step_op(
            *dense_args,
            _index(locs, _WIDE),
            _index(row_req, idx),
            inverse.contiguous(),
            page_size,
            dense_locs,
        )

    ops = {
        "build_inverse": build_inverse,
        "materialize": materialize,
        "fill_current": fill_current,
        "remap_locs": remap_locs,
        "current_page_mask": current_page_mask,
        "plan_slots": plan_slots,
        "fill_sources": fill_sources,
        "build_dense": build_dense,
        "layer_step": layer_step,
    }
    if impl == "cuda":  # the shard ops have no Triton kernels (cpkv_runtime.NO_TRITON)
        ops["shard_plan"] = ns.shard_plan_cuda.default  # the C++ op checks its arguments
    return ops


def _plan_triton(op: Callable[..., object]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A planner over ``op`` (the Triton custom op or its bare launcher): one workspace for the
    outputs, one for the inverse plus its scratch row, the contract tuple as views of them."""

    def plan(
        req_pages: torch.Tensor,
        prefix_lens: torch.Tensor,
        extend_lens: torch.Tensor,
        page_size: int,
        num_pages: int,
        max_slots: int,
        dedup: bool,
    ) -> tuple[torch.Tensor, ...]:
        bsz, width = req_pages.shape
        device = req_pages.device
        workspace = torch.empty(
            workspace_size(bsz, width, max_slots), dtype=torch.int32, device=device
        )
        inverse = torch.empty((bsz + 1, num_pages), dtype=torch.int32, device=device)
        op(req_pages, prefix_lens, extend_lens, page_size, num_pages, max_slots, dedup,
           workspace, inverse)  # fmt: skip
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
