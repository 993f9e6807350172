"""The metadata checks of each op's arguments (shapes, dtypes, devices), for the kernel backends.

Only metadata is read: reading values would sync with the host and break CUDA-graph capture.
Value checks (pages in range, a page listed twice by one request) belong to the public ops'
validation (``_ops.py``, ``_layout.py``); the kernels skip out-of-range entries instead of faulting.
One check per op, named after it (``shard_plan`` has none: its CUDA op checks in C++), each
taking the op's bound arguments (``a.kv_pool``...) and raising :class:`BadArgs`, which
``OpSpec.check_args`` turns into the caller's error class (``_contract.OP_SPECS``).
"""

from __future__ import annotations

from collections.abc import Container
from types import SimpleNamespace
from typing import Any

import torch

__all__ = ["BadArgs"]

# Any integer dtype is accepted (the runtime allows them); the kernel wrappers widen narrow ones.
_INDEX = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)
_PAGES = range(2, 64)  # (n, P, *row): two dims or more (built once: these checks run per call)


class BadArgs(Exception):
    """An argument of the wrong shape, dtype or device (the message names it and the fix)."""


def _dtype(t: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in allowed:
        want = "an integer dtype" if allowed == _INDEX else str(allowed[0]).removeprefix("torch.")
        raise BadArgs(
            f"{name} must be {want}, got {str(t.dtype).removeprefix('torch.')}: "
            f"pass {name}.to(torch.{str(allowed[0]).removeprefix('torch.')})"
        )


def _ndim(t: torch.Tensor, name: str, dims: Container[int], shape: str) -> None:
    if t.dim() not in dims:
        raise BadArgs(f"{name} must be {shape}, got shape {tuple(t.shape)}")


def _same_device(ref: torch.Tensor, ref_name: str, **others: torch.Tensor) -> None:
    for name, t in others.items():
        if t.device != ref.device:
            raise BadArgs(
                f"{name} is on {t.device} but {ref_name} is on {ref.device}: "
                "move both to one device"
            )


def _len(t: torch.Tensor, name: str, n: int, what: str) -> None:
    if t.shape[0] != n:
        raise BadArgs(f"{name} must have {n} entries ({what}), got {t.shape[0]}")


def _index_1d(a: Any, names: tuple[str, ...], n: int, shape: str, what: str) -> None:
    for name in names:
        x = getattr(a, name)
        _ndim(x, name, (1,), shape)
        _dtype(x, name, _INDEX)
        _len(x, name, n, what)


def _inverse(t: torch.Tensor) -> None:
    _ndim(t, "inverse", (2,), "(B, num_pages)")
    _dtype(t, "inverse", (torch.int32,))


def build_inverse(a: Any) -> None:
    _ndim(a.slot_table, "slot_table", (2,), "(B, M)")
    _dtype(a.slot_table, "slot_table", _INDEX)
    _dtype(a.req_pages, "req_pages", _INDEX)
    _same_device(a.slot_table, "slot_table", req_pages=a.req_pages)
    if a.req_pages.shape != a.slot_table.shape:
        raise BadArgs(
            f"req_pages must match slot_table's shape {tuple(a.slot_table.shape)}, "
            f"got {tuple(a.req_pages.shape)}"
        )
    if a.num_pages < 0:
        raise BadArgs(f"num_pages must be >= 0, got {a.num_pages}")


def _pages_out(kv_pool: torch.Tensor, slot_page: torch.Tensor, out: torch.Tensor) -> None:
    want = (slot_page.shape[0], *kv_pool.shape[1:])
    if tuple(out.shape) != want or out.dtype != kv_pool.dtype:
        raise BadArgs(
            f"out must be {want} {kv_pool.dtype} (S, P, *row), got {tuple(out.shape)} {out.dtype}"
        )


def materialize(a: Any) -> None:
    _ndim(a.kv_pool, "kv_pool", _PAGES, "(num_pages, P, *row)")
    _ndim(a.slot_page, "slot_page", (1,), "(S,)")
    _dtype(a.slot_page, "slot_page", _INDEX)
    _same_device(a.kv_pool, "kv_pool", slot_page=a.slot_page)
    if a.out is not None:
        _pages_out(a.kv_pool, a.slot_page, a.out)
        _same_device(a.kv_pool, "kv_pool", out=a.out)


def _rows_like(current_kv: torch.Tensor, dense: torch.Tensor, whose: str) -> None:
    if tuple(current_kv.shape[1:]) != tuple(dense.shape[2:]) or current_kv.dtype != dense.dtype:
        raise BadArgs(
            f"current_kv must be (T, {', '.join(map(str, dense.shape[2:]))}) {dense.dtype} to "
            f"match {whose}, got {tuple(current_kv.shape)} {current_kv.dtype}"
        )


def fill_current(a: Any) -> None:
    _ndim(a.dense, "dense", _PAGES, "(S, P, *row)")
    if a.page_size <= 0 or a.dense.shape[1] != a.page_size:
        raise BadArgs(
            f"dense must be (S, page_size={a.page_size}, *row), got shape {tuple(a.dense.shape)}"
        )
    _rows_like(a.current_kv, a.dense, "dense rows")
    rows = a.current_kv.shape[0]
    _index_1d(a, ("token_req", "out_cache_loc"), rows, "(T,)", "one per row of current_kv")
    _inverse(a.inverse)
    _same_device(
        a.dense, "dense", current_kv=a.current_kv, token_req=a.token_req,
        out_cache_loc=a.out_cache_loc, inverse=a.inverse,
    )  # fmt: skip


def remap_locs(a: Any) -> None:
    _ndim(a.locs, "locs", (1, 2), "(N,) or (N, K)")
    _dtype(a.locs, "locs", _INDEX)
    _index_1d(a, ("req_id",), a.locs.shape[0], "(N,)", "one per row of locs")
    _inverse(a.inverse)
    if a.page_size <= 0:
        raise BadArgs(f"page_size must be positive, got {a.page_size}")
    _same_device(a.locs, "locs", req_id=a.req_id, inverse=a.inverse)
    if a.out is not None:
        if a.out.shape != a.locs.shape or a.out.dtype != torch.int32:
            raise BadArgs(
                f"out must be int32 of locs' shape {tuple(a.locs.shape)}, "
                f"got {tuple(a.out.shape)} {a.out.dtype}"
            )
        _same_device(a.locs, "locs", out=a.out)


def _batch_lens(a: Any) -> None:
    _ndim(a.req_pages, "req_pages", (2,), "(B, M)")
    _dtype(a.req_pages, "req_pages", _INDEX)
    _index_1d(a, ("prefix_lens", "extend_lens"), a.req_pages.shape[0], "(B,)", "one per request")


def current_page_mask(a: Any) -> None:
    _batch_lens(a)
    if a.page_size <= 0:
        raise BadArgs(f"page_size must be positive, got {a.page_size}")
    _same_device(a.req_pages, "req_pages", prefix_lens=a.prefix_lens, extend_lens=a.extend_lens)


def plan_slots(a: Any) -> None:
    _batch_lens(a)
    for name, value in (("page_size", a.page_size), ("num_pages", a.num_pages)):
        if value < 1:
            raise BadArgs(f"{name} must be >= 1, got {value}")
    if a.max_slots < 0:
        raise BadArgs(f"max_slots must be >= 0, got {a.max_slots}")
    if a.req_pages.numel() >= 2**31 or a.max_slots >= 2**31:
        raise BadArgs(
            f"plan_slots numbers pairs and slots in int32: B * M = {a.req_pages.numel()} and "
            f"max_slots = {a.max_slots} must stay below 2^31"
        )
    _same_device(a.req_pages, "req_pages", prefix_lens=a.prefix_lens, extend_lens=a.extend_lens)


def fill_sources(a: Any) -> None:
    rows = a.token_req.shape[0] if a.token_req.dim() == 1 else -1
    _index_1d(a, ("token_req", "out_cache_loc"), rows, "(T,)", "one per current row")
    _inverse(a.inverse)
    if a.page_size <= 0 or a.num_slots < 0:
        raise BadArgs(
            f"page_size must be positive and num_slots >= 0, got {a.page_size} and {a.num_slots}"
        )
    if rows >= 2**31:
        raise BadArgs(f"fill_sources numbers rows in int32: T = {rows} must stay below 2^31")
    _same_device(a.inverse, "inverse", token_req=a.token_req, out_cache_loc=a.out_cache_loc)


def build_dense(a: Any, out: str = "out") -> None:
    """``out`` names the dense buffer (``layer_step`` calls it ``dense``; messages say ``out``)."""
    dense = a[out]
    _ndim(a.kv_pool, "kv_pool", _PAGES, "(num_pages, P, *row)")
    _pages_out(a.kv_pool, a.slot_page, dense)
    _rows_like(a.current_kv, dense, "the dense rows")
    _ndim(a.slot_page, "slot_page", (1,), "(S,)")
    _dtype(a.slot_page, "slot_page", _INDEX)
    if tuple(a.sources.shape) != tuple(dense.shape[:2]) or a.sources.dtype != torch.int32:
        raise BadArgs(
            f"sources must be int32 {tuple(dense.shape[:2])} (S, P, from fill_sources), "
            f"got {a.sources.dtype} {tuple(a.sources.shape)}"
        )
    named = {"slot_page": a.slot_page, "current_kv": a.current_kv, "sources": a.sources}
    named["out"] = dense
    if a.used_slots is not None:
        if a.used_slots.numel() != 1 or a.used_slots.dtype != torch.int32:
            raise BadArgs(
                f"used_slots must be one int32 count (layout.used_slots) or None, got "
                f"{a.used_slots.dtype} {tuple(a.used_slots.shape)}"
            )
        named["used_slots"] = a.used_slots
    _same_device(a.kv_pool, "kv_pool", **named)


def layer_step(a: Any) -> None:
    build_dense(a, out="dense")
    remap_locs(  # layer_step's remap arguments under remap_locs' names
        SimpleNamespace(locs=a.locs, req_id=a.row_req, inverse=a.inverse, page_size=a.page_size,
                        out=a.dense_locs)
    )  # fmt: skip
    if a.dense.shape[1] != a.page_size:
        raise BadArgs(f"page_size = {a.page_size} but dense pages hold {a.dense.shape[1]} rows")
