"""Input validation shared by the Triton and CUDA wrappers; raises before any launch.

Only metadata is checked (shapes, dtypes, devices): reading values would sync with the host and
break CUDA-graph capture. Value checks (pages in range, a page listed twice by one request) belong
to ``cpkv_runtime``'s validation; the kernels skip out-of-range entries instead of faulting.
"""

from __future__ import annotations

from collections.abc import Container

import torch

from .errors import KernelInputError

# Any integer dtype is accepted (the runtime allows them); the wrappers widen narrow ones.
_INDEX = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)
_PAGES = range(2, 64)  # (n, P, *row): two dims or more (built once: these checks run per call)


def _dtype(t: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in allowed:
        want = "an integer dtype" if allowed == _INDEX else str(allowed[0]).removeprefix("torch.")
        raise KernelInputError(
            f"{name} must be {want}, got {str(t.dtype).removeprefix('torch.')}: "
            f"pass {name}.to(torch.{str(allowed[0]).removeprefix('torch.')})"
        )


def _ndim(t: torch.Tensor, name: str, dims: Container[int], shape: str) -> None:
    if t.dim() not in dims:
        raise KernelInputError(f"{name} must be {shape}, got shape {tuple(t.shape)}")


def _same_device(ref: torch.Tensor, ref_name: str, **others: torch.Tensor) -> None:
    for name, t in others.items():
        if t.device != ref.device:
            raise KernelInputError(
                f"{name} is on {t.device} but {ref_name} is on {ref.device}: "
                "move both to one device"
            )


def _len(t: torch.Tensor, name: str, n: int, what: str) -> None:
    if t.shape[0] != n:
        raise KernelInputError(f"{name} must have {n} entries ({what}), got {t.shape[0]}")


def check_build_inverse(slot_table: torch.Tensor, req_pages: torch.Tensor, num_pages: int) -> None:
    _ndim(slot_table, "slot_table", (2,), "(B, M)")
    _dtype(slot_table, "slot_table", _INDEX)
    _dtype(req_pages, "req_pages", _INDEX)
    _same_device(slot_table, "slot_table", req_pages=req_pages)
    if req_pages.shape != slot_table.shape:
        raise KernelInputError(
            f"req_pages must match slot_table's shape {tuple(slot_table.shape)}, "
            f"got {tuple(req_pages.shape)}"
        )
    if num_pages < 0:
        raise KernelInputError(f"num_pages must be >= 0, got {num_pages}")


def check_materialize(
    kv_pool: torch.Tensor, slot_page: torch.Tensor, out: torch.Tensor | None
) -> None:
    _ndim(kv_pool, "kv_pool", _PAGES, "(num_pages, P, *row)")
    _ndim(slot_page, "slot_page", (1,), "(S,)")
    _dtype(slot_page, "slot_page", _INDEX)
    _same_device(kv_pool, "kv_pool", slot_page=slot_page)
    if out is not None:
        want = (slot_page.shape[0], *kv_pool.shape[1:])
        if tuple(out.shape) != want or out.dtype != kv_pool.dtype:
            raise KernelInputError(
                f"out must be {want} {kv_pool.dtype} (S, P, *row), "
                f"got {tuple(out.shape)} {out.dtype}"
            )
        _same_device(kv_pool, "kv_pool", out=out)


def check_fill_current(
    dense: torch.Tensor,
    current_kv: torch.Tensor,
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
) -> None:
    _ndim(dense, "dense", _PAGES, "(S, P, *row)")
    if page_size <= 0 or dense.shape[1] != page_size:
        raise KernelInputError(
            f"dense must be (S, page_size={page_size}, *row), got shape {tuple(dense.shape)}"
        )
    if tuple(current_kv.shape[1:]) != tuple(dense.shape[2:]) or current_kv.dtype != dense.dtype:
        raise KernelInputError(
            f"current_kv must be (T, {', '.join(map(str, dense.shape[2:]))}) {dense.dtype} "
            "to match "
            f"dense rows, got {tuple(current_kv.shape)} {current_kv.dtype}"
        )
    t = current_kv.shape[0]
    for name, x in (("token_req", token_req), ("out_cache_loc", out_cache_loc)):
        _ndim(x, name, (1,), "(T,)")
        _dtype(x, name, _INDEX)
        _len(x, name, t, "one per row of current_kv")
    _ndim(inverse, "inverse", (2,), "(B, num_pages)")
    _dtype(inverse, "inverse", (torch.int32,))
    _same_device(
        dense,
        "dense",
        current_kv=current_kv,
        token_req=token_req,
        out_cache_loc=out_cache_loc,
        inverse=inverse,
    )


def check_remap_locs(
    locs: torch.Tensor,
    req_id: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    out: torch.Tensor | None,
) -> None:
    _ndim(locs, "locs", (1, 2), "(N,) or (N, K)")
    _dtype(locs, "locs", _INDEX)
    _ndim(req_id, "req_id", (1,), "(N,)")
    _dtype(req_id, "req_id", _INDEX)
    _len(req_id, "req_id", locs.shape[0], "one per row of locs")
    _ndim(inverse, "inverse", (2,), "(B, num_pages)")
    _dtype(inverse, "inverse", (torch.int32,))
    if page_size <= 0:
        raise KernelInputError(f"page_size must be positive, got {page_size}")
    _same_device(locs, "locs", req_id=req_id, inverse=inverse)
    if out is not None:
        if out.shape != locs.shape or out.dtype != torch.int32:
            raise KernelInputError(
                f"out must be int32 of locs' shape {tuple(locs.shape)}, "
                f"got {tuple(out.shape)} {out.dtype}"
            )
        _same_device(locs, "locs", out=out)


def check_current_page_mask(
    req_pages: torch.Tensor, prefix_lens: torch.Tensor, extend_lens: torch.Tensor, page_size: int
) -> None:
    _ndim(req_pages, "req_pages", (2,), "(B, M)")
    _dtype(req_pages, "req_pages", _INDEX)
    for name, x in (("prefix_lens", prefix_lens), ("extend_lens", extend_lens)):
        _ndim(x, name, (1,), "(B,)")
        _dtype(x, name, _INDEX)
        _len(x, name, req_pages.shape[0], "one per request")
    if page_size <= 0:
        raise KernelInputError(f"page_size must be positive, got {page_size}")
    _same_device(req_pages, "req_pages", prefix_lens=prefix_lens, extend_lens=extend_lens)


def check_plan_slots(
    req_pages: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    page_size: int,
    num_pages: int,
    max_slots: int,
) -> None:
    _ndim(req_pages, "req_pages", (2,), "(B, M)")
    _dtype(req_pages, "req_pages", _INDEX)
    for name, x in (("prefix_lens", prefix_lens), ("extend_lens", extend_lens)):
        _ndim(x, name, (1,), "(B,)")
        _dtype(x, name, _INDEX)
        _len(x, name, req_pages.shape[0], "one per request")
    for name, value, low in (("page_size", page_size, 1), ("num_pages", num_pages, 1)):
        if value < low:
            raise KernelInputError(f"{name} must be >= {low}, got {value}")
    if max_slots < 0:
        raise KernelInputError(f"max_slots must be >= 0, got {max_slots}")
    if req_pages.numel() >= 2**31 or max_slots >= 2**31:
        raise KernelInputError(
            f"plan_slots numbers pairs and slots in int32: B * M = {req_pages.numel()} and "
            f"max_slots = {max_slots} must stay below 2^31"
        )
    _same_device(req_pages, "req_pages", prefix_lens=prefix_lens, extend_lens=extend_lens)


def check_fill_sources(
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    num_slots: int,
) -> None:
    t = token_req.shape[0] if token_req.dim() == 1 else -1
    for name, x in (("token_req", token_req), ("out_cache_loc", out_cache_loc)):
        _ndim(x, name, (1,), "(T,)")
        _dtype(x, name, _INDEX)
        _len(x, name, t, "one per current row")
    _ndim(inverse, "inverse", (2,), "(B, num_pages)")
    _dtype(inverse, "inverse", (torch.int32,))
    if page_size <= 0 or num_slots < 0:
        raise KernelInputError(
            f"page_size must be positive and num_slots >= 0, got {page_size} and {num_slots}"
        )
    if t >= 2**31:
        raise KernelInputError(f"fill_sources numbers rows in int32: T = {t} must stay below 2^31")
    _same_device(inverse, "inverse", token_req=token_req, out_cache_loc=out_cache_loc)


def check_build_dense(
    kv_pool: torch.Tensor,
    slot_page: torch.Tensor,
    current_kv: torch.Tensor,
    sources: torch.Tensor,
    used_slots: torch.Tensor | None,
    out: torch.Tensor,
) -> None:
    _ndim(kv_pool, "kv_pool", _PAGES, "(num_pages, P, *row)")
    want = (slot_page.shape[0], *kv_pool.shape[1:])
    if tuple(out.shape) != want or out.dtype != kv_pool.dtype:
        raise KernelInputError(
            f"out must be {want} {kv_pool.dtype} (S, P, *row), got {tuple(out.shape)} {out.dtype}"
        )
    if tuple(current_kv.shape[1:]) != tuple(out.shape[2:]) or current_kv.dtype != out.dtype:
        raise KernelInputError(
            f"current_kv must be (T, {', '.join(map(str, out.shape[2:]))}) {out.dtype} to match "
            f"the dense rows, got {tuple(current_kv.shape)} {current_kv.dtype}"
        )
    _ndim(slot_page, "slot_page", (1,), "(S,)")
    _dtype(slot_page, "slot_page", _INDEX)
    if tuple(sources.shape) != tuple(out.shape[:2]) or sources.dtype != torch.int32:
        raise KernelInputError(
            f"sources must be int32 {tuple(out.shape[:2])} (S, P, from fill_sources), "
            f"got {sources.dtype} {tuple(sources.shape)}"
        )
    named = {"slot_page": slot_page, "current_kv": current_kv, "sources": sources, "out": out}
    if used_slots is not None:
        if used_slots.numel() != 1 or used_slots.dtype != torch.int32:
            raise KernelInputError(
                f"used_slots must be one int32 count (layout.used_slots) or None, got "
                f"{used_slots.dtype} {tuple(used_slots.shape)}"
            )
        named["used_slots"] = used_slots
    _same_device(kv_pool, "kv_pool", **named)
