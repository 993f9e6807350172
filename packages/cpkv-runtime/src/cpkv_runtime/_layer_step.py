"""The per-layer sequence of one forward: materialize -> fill_current -> remap_locs, launches only.

A forward plans its layout once (:func:`plan_layout_static`); every layer then copies its pool
pages into the dense buffer, writes the current chunk's KV over its private slots, and remaps the
indexer's top-k pool locations into that buffer. :func:`prepare_layer_step` does everything that
can be done once per forward (backend choice, index dtypes, value checks); a :class:`LayerStep`
call is three kernel launches on device tensors, no host sync and no allocation, so it also runs
inside a CUDA graph. Per-layer tensors get metadata checks (shapes, dtypes, strides, devices) the
first time a signature is seen, then a tuple comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._bytes import row_contiguous
from ._checks import as_index, same_device
from ._dispatch import resolve
from ._layout import Layout
from ._op_checks import check_fill_values, check_locs
from ._torch_ops import materialize_padded
from .errors import LayoutError

__all__ = ["LayerStep", "prepare_layer_step"]

_Meta = tuple[object, ...]


def _meta(t: torch.Tensor) -> _Meta:
    return (t.shape, t.dtype, t.stride(), t.device)


@dataclass(frozen=True, eq=False)
class LayerStep:
    """materialize -> fill_current -> remap_locs for every layer of one forward.

    Build with :func:`prepare_layer_step`. Attributes are read-only device tensors reused by
    every layer.

    Attributes:
        layout: the forward's layout (padded or exact).
        token_req: (T,) int32 request of each current row (any value on padding rows).
        out_cache_loc: (T,) int32/int64 pool location of each current row, -1 = padding row.
        row_req: (N,) int32 request of each top-k row.
        backends: op name -> the backend that runs it.
    """

    layout: Layout
    token_req: torch.Tensor
    out_cache_loc: torch.Tensor
    row_req: torch.Tensor
    backends: dict[str, str]
    _materialize: Callable[..., object] = field(repr=False)
    _fill: Callable[..., object] = field(repr=False)
    _remap: Callable[..., object] = field(repr=False)
    _seen: dict[str, _Meta] = field(default_factory=dict, repr=False)

    def build_dense(
        self, kv_pool: torch.Tensor, current_kv: torch.Tensor, dense: torch.Tensor
    ) -> torch.Tensor:
        """Materialize this layer's pages into ``dense`` and write the current KV over them.

        Args:
            kv_pool: (num_pages, P, *row) this layer's pool, any dtype, pages contiguous.
            current_kv: (T, *row) this layer's current KV, same row shape and dtype.
            dense: (num_slots, P, *row), written (padding slots untouched).
        """
        self._check("kv_pool", kv_pool, dense=dense, current_kv=current_kv)
        lay = self.layout
        self._materialize(kv_pool, lay.slot_page, dense)
        self._fill(
            dense, current_kv, self.token_req, self.out_cache_loc, lay.inverse, lay.page_size
        )
        return dense

    def remap(self, locs: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Remap top-k pool locations into ``dense`` locations of each row's request.

        Args:
            locs: (N, K) int32/int64 pool locations, -1 = absent, contiguous.
            out: (N, K) int32, written: ``inverse[row_req[n], loc // P] * P + loc % P``, -1 kept.
        """
        self._check("locs", locs, out=out)
        lay = self.layout
        self._remap(locs, self.row_req, lay.inverse, lay.page_size, out)
        return out

    def __call__(
        self,
        kv_pool: torch.Tensor,
        current_kv: torch.Tensor,
        locs: torch.Tensor,
        dense: torch.Tensor,
        dense_locs: torch.Tensor,
    ) -> None:
        """One layer: :meth:`build_dense` then :meth:`remap`."""
        self.build_dense(kv_pool, current_kv, dense)
        self.remap(locs, dense_locs)

    def _check(self, key: str, first: torch.Tensor, **others: torch.Tensor) -> None:
        """Metadata checks, once per distinct signature of the per-layer tensors."""
        metas = (_meta(first), *(_meta(t) for t in others.values()))
        if self._seen.get(key) == metas:
            return
        if key == "kv_pool":
            _check_dense_args(self, first, others["current_kv"], others["dense"])
        else:
            _check_remap_args(self, first, others["out"])
        self._seen[key] = metas


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


def _check_remap_args(step: LayerStep, locs: torch.Tensor, out: torch.Tensor) -> None:
    n = step.row_req.shape[0]
    if locs.dim() != 2 or locs.shape[0] != n or not locs.is_contiguous():
        raise LayoutError(f"locs must be contiguous ({n}, K), got {tuple(locs.shape)}")
    if locs.dtype not in (torch.int32, torch.int64):
        raise LayoutError(f"locs must be int32 or int64, got {locs.dtype}")
    if out.shape != locs.shape or out.dtype != torch.int32 or not out.is_contiguous():
        raise LayoutError(
            f"out must be contiguous int32 {tuple(locs.shape)}, got {out.dtype} {tuple(out.shape)}"
        )
    same_device(layout=step.layout.req_pages, locs=locs, out=out)


def prepare_layer_step(
    layout: Layout,
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    *,
    row_req: torch.Tensor | None = None,
    backend: str | None = None,
    validate: bool = True,
) -> LayerStep:
    """Resolve backends and fix index dtypes once per forward, for every layer's :class:`LayerStep`.

    Args:
        layout: from :func:`plan_layout_static` (or :func:`plan_layout`).
        token_req: (T,) int request of each current row.
        out_cache_loc: (T,) int32/int64 pool location of each current row, -1 = padding.
        row_req: (N,) int request of each top-k row; ``token_req`` by default (one top-k row
            per current token, as the indexer gives).
        backend: force one backend for all three ops (default: ``CPKV_BACKEND``, else auto).
        validate: check ``out_cache_loc``/``token_req``/``row_req`` values as
            :func:`fill_current` and :func:`remap_locs` do (one host sync, once per forward).

    Returns:
        A :class:`LayerStep`.
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
    chosen = {
        op: resolve(op, device, backend) for op in ("materialize", "fill_current", "remap_locs")
    }
    raw = {op: b.raw_ops.get(op, b.ops[op]) for op, b in chosen.items()}
    if layout.padded and chosen["materialize"].name == "torch":
        raw["materialize"] = materialize_padded
    loc_dtype = out_cache_loc.dtype if out_cache_loc.dtype == torch.int64 else torch.int32
    return LayerStep(
        layout=layout,
        token_req=token_req.to(torch.int32).contiguous(),
        out_cache_loc=out_cache_loc.to(loc_dtype).contiguous(),
        row_req=row_req.to(torch.int32).contiguous(),
        backends={op: b.name for op, b in chosen.items()},
        _materialize=raw["materialize"],
        _fill=raw["fill_current"],
        _remap=raw["remap_locs"],
    )
