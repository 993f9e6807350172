"""Backend-contract callables over the ``cpkv::<op>_<impl>`` custom ops.

Each function has the signature ``cpkv_runtime._backend`` documents, checks metadata (never
values: no host sync), allocates the output when none is passed, and calls the custom op, which
writes into it. With outputs passed in, nothing here allocates or syncs, so the calls capture in
CUDA graphs; the custom ops have fake kernels, so they trace under ``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import _checks
from ._plan_workspace import split_workspace, workspace_size

_WIDE = (torch.int32, torch.int64)


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
    plan_op = getattr(ns, f"plan_slots_{impl}")
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
        bsz, width = req_pages.shape
        device = req_pages.device
        workspace = torch.empty(
            workspace_size(bsz, width, max_slots), dtype=torch.int32, device=device
        )
        inverse = torch.empty((bsz + 1, num_pages), dtype=torch.int32, device=device)
        lens = (prefix_lens.dtype,) if prefix_lens.dtype in _WIDE else (torch.int32,)
        plan_op(
            _index(req_pages, _WIDE),
            _index(prefix_lens, lens),
            _index(extend_lens, lens),
            page_size,
            num_pages,
            max_slots,
            bool(dedup),
            workspace,
            inverse,
        )
        pages, lens_out, table, slot_page, slot_owner, info = split_workspace(
            workspace, bsz, width, max_slots
        )
        return pages, lens_out, table, slot_page, slot_owner, inverse[:bsz], info

    return {
        "build_inverse": build_inverse,
        "materialize": materialize,
        "fill_current": fill_current,
        "remap_locs": remap_locs,
        "current_page_mask": current_page_mask,
        "plan_slots": plan_slots,
    }


def make_raw_ops(impl: str) -> dict[str, Callable[..., object]]:
    """The per-layer ops' bare launchers (``cpkv_runtime.Backend.raw_ops``): no checks, no
    conversion, outputs passed in. CUDA: the ``torch.ops`` overloads (C++ checks only); Triton:
    the launchers under the custom ops."""
    if impl == "cuda":
        ns = torch.ops.cpkv
        return {
            op: getattr(ns, f"{op}_cuda").default
            for op in ("materialize", "fill_current", "remap_locs")
        }
    from .ops.fill_current import launch_fill_current
    from .ops.materialize import launch_materialize
    from .ops.remap_locs import launch_remap_locs

    return {
        "materialize": launch_materialize,
        "fill_current": launch_fill_current,
        "remap_locs": launch_remap_locs,
    }
