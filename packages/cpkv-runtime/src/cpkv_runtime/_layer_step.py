"""The per-layer sequence of one forward: build the dense buffer, remap the top-k, launches only.

A forward plans its layout once (:func:`plan_layout_static`); every layer then copies its pool
pages into the dense buffer, writes the current chunk's KV over its private slots, and remaps the
indexer's top-k pool locations into that buffer. :func:`prepare_layer_step` does everything that
can be done once per forward: backend choice, index dtypes, value checks, and ``fill_sources``
(which current row lands in which dense row), so that each layer writes every dense row once
(``build_dense``: the pool copy and the current-KV scatter in one pass, no ordering between them).

A :class:`LayerStep` call is one backend call (``layer_step``: on CUDA one C++ entry point that
launches the dense build and the remap), no host sync and no allocation, so it also runs inside a
CUDA graph. Host time per layer is the cost it is built to keep small: per-layer tensors get
metadata checks (shapes, dtypes, strides, devices) the first time a signature is seen, then one
tuple comparison, and the call binds every per-forward argument in a closure made once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._backend import Backend
from ._bytes import row_contiguous
from ._checks import as_index, same_device
from ._dispatch import resolve
from ._layout import Layout
from ._op_checks import check_fill_values, check_locs
from .errors import LayoutError

__all__ = ["LayerStep", "prepare_layer_step"]

_Meta = tuple[object, ...]
_OPS = ("fill_sources", "build_dense", "remap_locs", "layer_step")

# A per-layer signature is (shape, strides, dtype, device index) of each tensor, spelled out: this
# runs on every layer, and a generator over the tensors costs twice the time. ``get_device()`` is
# an int (-1 on CPU), cheaper than building a ``torch.device``; a tensor moved to another device
# changes the signature, so the checks run again and name it.


@dataclass(frozen=True, eq=False)
class LayerStep:
    """The dense build and the top-k remap for every layer of one forward.

    Build with :func:`prepare_layer_step`. Attributes are read-only device tensors reused by
    every layer.

    Attributes:
        layout: the forward's layout (padded or exact).
        token_req: (T,) int32 request of each current row (any value on padding rows).
        out_cache_loc: (T,) int32/int64 pool location of each current row, -1 = padding row.
        row_req: (N,) int32 request of each top-k row.
        sources: (S, P) int32 current row written into each dense row, -1 = none
            (``fill_sources``).
        backends: op name -> the backend that runs it.
    """

    layout: Layout
    token_req: torch.Tensor
    out_cache_loc: torch.Tensor
    row_req: torch.Tensor
    sources: torch.Tensor
    backends: dict[str, str]
    _build: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object] = field(repr=False)
    _remap: Callable[[torch.Tensor, torch.Tensor], object] = field(repr=False)
    _layer: Callable[..., object] = field(repr=False)
    _seen: dict[str, _Meta] = field(default_factory=dict, repr=False)

    def build_dense(
        self, kv_pool: torch.Tensor, current_kv: torch.Tensor, dense: torch.Tensor
    ) -> torch.Tensor:
        """Write this layer's pages, and its current KV over its private slots, into ``dense``.

        Args:
            kv_pool: (num_pages, P, *row) this layer's pool, any dtype, pages contiguous.
            current_kv: (T, *row) this layer's current KV, same row shape and dtype.
            dense: (num_slots, P, *row), written (padding slots untouched).
        """
        metas = (
            kv_pool.shape, kv_pool.stride(), kv_pool.dtype, kv_pool.get_device(),
            current_kv.shape, current_kv.stride(), current_kv.dtype, current_kv.get_device(),
            dense.shape, dense.stride(), dense.dtype, dense.get_device(),
        )  # fmt: skip
        if self._seen.get("dense") != metas:
            _check_dense_args(self, kv_pool, current_kv, dense)
            self._seen["dense"] = metas
        self._build(kv_pool, current_kv, dense)
        return dense

    def remap(self, locs: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Remap top-k pool locations into ``dense`` locations of each row's request.

        Args:
            locs: (N, K) int32/int64 pool locations, -1 = absent, contiguous.
            out: (N, K) int32, written: ``inverse[row_req[n], loc // P] * P + loc % P``, -1 kept.
        """
        metas = (
            locs.shape, locs.stride(), locs.dtype, locs.get_device(),
            out.shape, out.stride(), out.dtype, out.get_device(),
        )  # fmt: skip
        if self._seen.get("remap") != metas:
            _check_remap_args(self, locs, out)
            self._seen["remap"] = metas
        self._remap(locs, out)
        return out

    def __call__(
        self,
        kv_pool: torch.Tensor,
        current_kv: torch.Tensor,
        locs: torch.Tensor,
        dense: torch.Tensor,
        dense_locs: torch.Tensor,
    ) -> None:
        """One layer: :meth:`build_dense` then :meth:`remap`, in one backend call."""
        metas = (
            kv_pool.shape, kv_pool.stride(), kv_pool.dtype, kv_pool.get_device(),
            current_kv.shape, current_kv.stride(), current_kv.dtype, current_kv.get_device(),
            dense.shape, dense.stride(), dense.dtype, dense.get_device(),
            locs.shape, locs.stride(), locs.dtype, locs.get_device(),
            dense_locs.shape, dense_locs.stride(), dense_locs.dtype, dense_locs.get_device(),
        )  # fmt: skip
        if self._seen.get("layer") != metas:
            _check_dense_args(self, kv_pool, current_kv, dense)
            _check_remap_args(self, locs, dense_locs, "dense_locs")
            self._seen["layer"] = metas
        self._layer(kv_pool, current_kv, locs, dense, dense_locs)


def _check_dense_args(
    step: LayerStep, kv_pool: torch.Tensor, current_kv: torch.Tensor, dense: torch.Tensor
) -> None:
    lay = step.layout
    want = {
        "kv_pool": (kv_pool, (lay.num_pages, lay.page_size)),
        "dense": (dense, (lay.num_slots, lay.page_size)),
        "current_kv": (current_kv, (step.token_req.shape[0],)),
    }
    for name, (t, lead) in want.items():
        if tuple(t.shape[: len(lead)]) != lead or not row_contiguous(t, 1):
            raise LayoutError(
                f"{name} must be ({', '.join(map(str, lead))}, *row) with each leading-dim row "
                f"contiguous, got shape {tuple(t.shape)} strides {t.stride()}"
            )
    rows = {n: (tuple(t.shape[len(lead) :]), t.dtype) for n, (t, lead) in want.items()}
    if len(set(rows.values())) != 1:
        raise LayoutError(f"kv_pool, dense and current_kv rows must agree, got {rows}")
    same_device(layout=lay.req_pages, kv_pool=kv_pool, dense=dense, current_kv=current_kv)


def _check_remap_args(
    step: LayerStep, locs: torch.Tensor, out: torch.Tensor, out_name: str = "out"
) -> None:
    n = step.row_req.shape[0]
    if locs.dim() != 2 or locs.shape[0] != n or not locs.is_contiguous():
        raise LayoutError(f"locs must be contiguous ({n}, K), got {tuple(locs.shape)}")
    if locs.dtype not in (torch.int32, torch.int64):
        raise LayoutError(f"locs must be int32 or int64, got {locs.dtype}")
    if out.shape != locs.shape or out.dtype != torch.int32 or not out.is_contiguous():
        raise LayoutError(
            f"{out_name} must be contiguous int32 {tuple(locs.shape)}, got {out.dtype} "
            f"{tuple(out.shape)}"
        )
    same_device(layout=step.layout.req_pages, locs=locs, **{out_name: out})


def _backends(device: torch.device, backend: str | None) -> dict[str, Backend]:
    """One backend for the whole sequence where it implements every op, else per op."""
    main = resolve("layer_step", device, backend)
    return {op: main if main.supports(op, device) else resolve(op, device, backend) for op in _OPS}


def prepare_layer_step(
    layout: Layout,
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    *,
    row_req: torch.Tensor | None = None,
    backend: str | None = None,
    validate: bool = True,
) -> LayerStep:
    """Resolve backends, fix index dtypes and find each dense row's source, once per forward.

    Args:
        layout: from :func:`plan_layout_static` (or :func:`plan_layout`).
        token_req: (T,) int request of each current row.
        out_cache_loc: (T,) int32/int64 pool location of each current row, -1 = padding.
        row_req: (N,) int request of each top-k row; ``token_req`` by default (one top-k row
            per current token, as the indexer gives).
        backend: force one backend for the sequence (default: ``CPKV_BACKEND``, else auto).
        validate: check ``out_cache_loc``/``token_req``/``row_req`` values as
            :func:`fill_current` and :func:`remap_locs` do (one host sync, once per forward).

    Returns:
        A :class:`LayerStep`. Its ``fill_sources`` ran here, on the current stream: no sync.
    """
    token_req = as_index(token_req, "token_req", 1)
    out_cache_loc = as_index(out_cache_loc, "out_cache_loc", 1)
    row_req = token_req if row_req is None else as_index(row_req, "row_req", 1)
    if token_req.shape != out_cache_loc.shape:
        raise LayoutError(
            f"token_req {tuple(token_req.shape)} and out_cache_loc {tuple(out_cache_loc.shape)} "
            f"must have one entry per current row"
        )
    device = same_device(
        layout=layout.req_pages, token_req=token_req, out_cache_loc=out_cache_loc, row_req=row_req
    )
    if validate:
        check_fill_values(layout, token_req, out_cache_loc)
        check_locs("row_req", row_req.unsqueeze(1), row_req, layout)
    chosen = _backends(device, backend)
    raw = {op: b.raw_ops.get(op, b.ops[op]) for op, b in chosen.items()}
    token_req = token_req.to(torch.int32).contiguous()
    loc_dtype = torch.int64 if out_cache_loc.dtype == torch.int64 else torch.int32
    out_cache_loc = out_cache_loc.to(loc_dtype).contiguous()
    row_req = row_req.to(torch.int32).contiguous()
    lay = layout
    page_size, inverse, slot_page, used = lay.page_size, lay.inverse, lay.slot_page, lay.used_slots
    sources = raw["fill_sources"](token_req, out_cache_loc, inverse, page_size, lay.num_slots)
    build, remap, layer_step = raw["build_dense"], raw["remap_locs"], raw["layer_step"]

    def build_one(kv_pool: torch.Tensor, current_kv: torch.Tensor, dense: torch.Tensor) -> None:
        build(kv_pool, slot_page, current_kv, sources, used, dense)

    def remap_one(locs: torch.Tensor, out: torch.Tensor) -> None:
        remap(locs, row_req, inverse, page_size, out)

    def layer_one(kv_pool, current_kv, locs, dense, dense_locs) -> None:
        layer_step(
            kv_pool, slot_page, current_kv, sources, used, dense,
            locs, row_req, inverse, page_size, dense_locs,
        )  # fmt: skip

    def layer_apart(kv_pool, current_kv, locs, dense, dense_locs) -> None:
        build(kv_pool, slot_page, current_kv, sources, used, dense)
        remap(locs, row_req, inverse, page_size, dense_locs)

    names = {op: b.name for op, b in chosen.items()}
    fused = names["layer_step"] == names["build_dense"] == names["remap_locs"]
    return LayerStep(
        layout=layout,
        token_req=token_req,
        out_cache_loc=out_cache_loc,
        row_req=row_req,
        sources=sources,
        backends=names,
        _build=build_one,
        _remap=remap_one,
        _layer=layer_one if fused else layer_apart,
    )
