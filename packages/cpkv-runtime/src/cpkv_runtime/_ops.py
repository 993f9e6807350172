"""Public ops: validate, dispatch to a backend, and under ``CPKV_DEBUG=1`` re-check invariants.

Every op takes ``backend=`` (``torch``/``triton``/``cuda``/``auto``; default: ``CPKV_BACKEND``,
else auto). ``validate=False`` skips the value-level checks, which cost one host sync per call on
valid input (shape, dtype and device checks always run and never sync).
"""

from __future__ import annotations

import torch

from ._bytes import byte_rows, row_contiguous
from ._checks import as_index, check_row_shape, first_true, raise_first, same_device
from ._dispatch import dispatch, resolve
from ._invariants import check_invariants, debug_enabled
from ._layout import Layout
from ._op_checks import check_fill_values, check_locs
from ._torch_ops import fill_current as fill_current_torch
from ._torch_ops import materialize_padded
from ._torch_ops import remap_locs as remap_locs_torch
from .errors import InvariantError, LayoutError

__all__ = [
    "current_page_mask",
    "fill_current",
    "gather_pages",
    "materialize",
    "remap_locs",
    "remap_positions",
]


def _check_dense(dense: torch.Tensor, layout: Layout, name: str = "dense") -> None:
    want = (layout.num_slots, layout.page_size)
    if dense.dim() < 2 or tuple(dense.shape[:2]) != want:
        raise LayoutError(
            f"{name} must be (num_slots, P, *row) = ({want[0]}, {want[1]}, ...), got "
            f"{tuple(dense.shape)}; fix: allocate it with materialize(kv_pool, layout)"
        )


def materialize(
    kv_pool: torch.Tensor,
    layout: Layout,
    *,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Copy the batch's pool pages into its dense buffer: ``dense[s] = kv_pool[slot_page[s]]``.

    One page per slot: a read-only page shared by several requests is copied once (dedup).

    Args:
        kv_pool: (num_pages, P, *row) any dtype (rows are opaque bytes), read-only.
        layout: from :func:`plan_layout`.
        out: optional (num_slots, P, *row) of kv_pool's dtype, written.
        backend: force a backend for this call (pools whose pages are not each one contiguous
            block always run on torch).

    Returns:
        dense: (num_slots, P, *row). Shared read-only pages appear once (``layout.dedup``).
        Padding slots of a :func:`plan_layout_static` layout are left as they were.
    """
    if kv_pool.dim() < 2 or tuple(kv_pool.shape[:2]) != (layout.num_pages, layout.page_size):
        raise LayoutError(
            f"kv_pool must be (num_pages, P, *row) = ({layout.num_pages}, {layout.page_size}, ...) "
            f"as planned, got {tuple(kv_pool.shape)}; fix: view the pool as pages, "
            f"e.g. buf.view(num_pages, P, -1)"
        )
    device = same_device(layout=layout.req_pages, kv_pool=kv_pool, out=out)
    if out is not None:
        _check_dense(out, layout, "out")
        check_row_shape("out", out, 2, "kv_pool", kv_pool, 2)
    if not (row_contiguous(kv_pool, 1) and (out is None or row_contiguous(out, 1))):
        backend = "torch"  # kernels take page-contiguous tensors only (see _backend.py)
    chosen = resolve("materialize", device, backend)
    if layout.padded and chosen.name == "torch":  # -1 padding slots: the kernels skip them
        if out is None:
            out = kv_pool.new_empty((layout.num_slots, *kv_pool.shape[1:]))
        dense = materialize_padded(kv_pool, layout.slot_page, out)
    else:
        dense = chosen.ops["materialize"](kv_pool, layout.slot_page, out)
    if debug_enabled():
        check_invariants(layout, kv_pool=kv_pool, dense=dense)
    return dense


def gather_pages(
    kv_pool: torch.Tensor,
    pages: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    backend: str | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Copy whole pool pages by index: ``out[i] = kv_pool[pages[i]]``.

    The page copy of :func:`materialize` without a layout, on the same kernels: for a caller
    that owns its slot order, e.g. a context-parallel rank packing the pages it owns into its
    all-gather block in the order every rank agreed on.

    Args:
        kv_pool: (num_pages, *page) any dtype (pages are opaque bytes), read-only.
        pages: (N,) int32/int64 source page of each output page.
        out: optional (N, *page) of kv_pool's dtype, written.
        backend: force a backend for this call (pools whose pages are not each one contiguous
            block always run on torch).
        validate: check that every page is in ``[0, num_pages)`` (one host sync).

    Returns:
        ``out``, or a new (N, *page) tensor.
    """
    pages = as_index(pages, "pages", 1)
    if kv_pool.dim() < 2:
        raise LayoutError(
            f"kv_pool must be (num_pages, *page) with at least 2 dims, got {tuple(kv_pool.shape)}"
            f"; fix: view a flat pool as pages, e.g. buf.view(num_pages, -1)"
        )
    device = same_device(kv_pool=kv_pool, pages=pages, out=out)
    want = (pages.shape[0], *kv_pool.shape[1:])
    if out is not None and (tuple(out.shape) != want or out.dtype != kv_pool.dtype):
        raise LayoutError(
            f"out must be {kv_pool.dtype} {want}, got {out.dtype} {tuple(out.shape)}; fix: "
            f"allocate one page per entry of pages"
        )
    if validate:
        raise_first(
            (pages < 0) | (pages >= kv_pool.shape[0]),
            lambda i: (
                f"pages[{i[0]}] = {int(pages[i])} is outside the pool [0, {kv_pool.shape[0]})"
            ),
        )
    if not (row_contiguous(kv_pool, 1) and (out is None or row_contiguous(out, 1))):
        backend = "torch"  # kernels take page-contiguous tensors only (see _backend.py)
    return dispatch("materialize", device, backend)(kv_pool, pages, out)


def fill_current(
    dense: torch.Tensor,
    current_kv: torch.Tensor,
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    layout: Layout,
    *,
    backend: str | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Write the batch's current KV into each request's private slots.

    ``dense[inverse[token_req[t], loc // P], loc % P] = current_kv[t]`` for ``loc =
    out_cache_loc[t] >= 0``; rows with loc -1 (CP padding) are skipped.

    Args:
        dense: (num_slots, P, *row), written in place.
        current_kv: (T, *row) same row shape and dtype as dense, read-only.
        token_req: (T,) int request of each token.
        out_cache_loc: (T,) int32/int64 pool location of each token, -1 = padding.
        layout: from :func:`plan_layout`.
        backend: force a backend for this call.
        validate: check values (locations in range, on a page the request writes, each once).

    Returns:
        ``dense``.
    """
    _check_dense(dense, layout)
    token_req = as_index(token_req, "token_req", 1)
    out_cache_loc = as_index(out_cache_loc, "out_cache_loc", 1)
    if current_kv.dim() < 1 or not (
        current_kv.shape[0] == token_req.shape[0] == out_cache_loc.shape[0]
    ):
        raise LayoutError(
            f"current_kv, token_req and out_cache_loc must have one row per token; got "
            f"{tuple(current_kv.shape)}, {tuple(token_req.shape)}, {tuple(out_cache_loc.shape)}"
        )
    check_row_shape("current_kv", current_kv, 1, "dense", dense, 2)
    device = same_device(
        layout=layout.req_pages,
        dense=dense,
        current_kv=current_kv,
        token_req=token_req,
        out_cache_loc=out_cache_loc,
    )
    if validate:
        check_fill_values(layout, token_req, out_cache_loc)
    before = dense.clone() if debug_enabled() else None
    if not (row_contiguous(dense, 1) and row_contiguous(current_kv, 1)):
        backend = "torch"  # kernels take page-contiguous tensors only (see _backend.py)
    fn = dispatch("fill_current", device, backend)
    fn(dense, current_kv, token_req, out_cache_loc, layout.inverse, layout.page_size)
    if before is not None:
        fill_current_torch(
            before, current_kv, token_req, out_cache_loc, layout.inverse, layout.page_size
        )
        if not torch.equal(byte_rows(before, 2), byte_rows(dense, 2)):
            raise InvariantError("invariant 1: fill_current wrote rows the definition does not")
        check_invariants(layout)
    return dense


def remap_locs(
    locs: torch.Tensor,
    req_id: torch.Tensor,
    layout: Layout,
    *,
    out: torch.Tensor | None = None,
    backend: str | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Map pool locations (e.g. the indexer's top-k) into the dense buffer of the row's request.

    Args:
        locs: (N,) or (N, topk) int32/int64 pool locations, -1 = absent, read-only.
        req_id: (N,) int request of each row (-1 allowed on rows that are all -1).
        layout: from :func:`plan_layout`.
        out: optional int32 tensor of locs' shape, written.
        backend: force a backend for this call.
        validate: check values (locations in range, requests of this batch).

    Returns:
        int32 of locs' shape: ``inverse[b, loc // P] * P + loc % P``. -1 stays -1; a location on a
        page the request does not use maps to -1.
    """
    locs = as_index(locs, "locs", (1, 2))
    req_id = as_index(req_id, "req_id", 1)
    device = same_device(layout=layout.req_pages, locs=locs, req_id=req_id, out=out)
    if out is not None and (out.shape != locs.shape or out.dtype != torch.int32):
        raise LayoutError(f"out must be int32 {tuple(locs.shape)}, got {out.dtype} {out.shape}")
    if validate:
        check_locs("locs", locs, req_id, layout, layout.num_pages * layout.page_size)
    result = dispatch("remap_locs", device, backend)(
        locs, req_id, layout.inverse, layout.page_size, out
    )
    if debug_enabled():
        _debug_remap(layout, locs, req_id, result)
    return result


def _debug_remap(layout: Layout, locs: torch.Tensor, req: torch.Tensor, got: torch.Tensor) -> None:
    want = remap_locs_torch(locs, req, layout.inverse, layout.page_size)
    if not torch.equal(want, got):
        raise InvariantError(f"remap_locs differs from the definition at {first_true(want != got)}")
    check_invariants(layout)


def remap_positions(
    positions: torch.Tensor,
    req_id: torch.Tensor,
    layout: Layout,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Map token positions inside each row's request to dense locations.

    Args:
        positions: (N,) or (N, topk) int positions ``i`` inside the request, -1 = absent.
        req_id: (N,) int request of each row.
        layout: from :func:`plan_layout`.
        validate: check values (positions >= -1, requests of this batch).

    Returns:
        int32 of positions' shape: ``slot_table[b, i // P] * P + i % P`` for ``0 <= i <
        seq_lens[b]``; -1 elsewhere.
    """
    positions = as_index(positions, "positions", (1, 2))
    req_id = as_index(req_id, "req_id", 1)
    same_device(layout=layout.req_pages, positions=positions, req_id=req_id)
    if validate:
        check_locs("positions", positions, req_id, layout)
    page_size = layout.page_size
    if layout.max_pages == 0 or layout.batch_size == 0:  # nothing to point at: all absent
        return torch.full(positions.shape, -1, dtype=torch.int32, device=positions.device)
    req = req_id.long().clamp(0, layout.batch_size - 1).reshape(-1, *([1] * (positions.dim() - 1)))
    pos = positions.long()
    j = torch.div(pos, page_size, rounding_mode="floor").clamp(0, layout.max_pages - 1)
    slot = layout.slot_table.long()[req, j]
    ok = (pos >= 0) & (pos < layout.seq_lens.long()[req]) & (req_id.long() >= 0).reshape(req.shape)
    return torch.where(ok, slot * page_size + pos % page_size, -1).to(torch.int32)


def current_page_mask(layout: Layout, *, backend: str | None = None) -> torch.Tensor:
    """Which ``(request, page index)`` pairs hold current tokens, keyed by request, never by page.

    Returns:
        bool (B, max_pages): True where request b's j-th page holds any of b's current tokens
        (``extend_lens[b] > 0`` and ``prefix_lens[b] // P <= j < ceil(seq_lens[b] / P)``).
    """
    fn = dispatch("current_page_mask", layout.device, backend)
    return fn(layout.req_pages, layout.prefix_lens, layout.extend_lens, layout.page_size)
