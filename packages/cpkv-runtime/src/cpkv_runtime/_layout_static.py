"""The per-forward planner for the hot path: :func:`plan_layout`'s slots in fixed shapes.

:func:`plan_layout` is the definition; it sizes its outputs by the number of slots, so it reads
values back to the host (validation, ``unique``, ``nonzero``, the token count), 1.2–2.3 ms for
8 requests on a 64K-token prefix. :func:`plan_layout_static` gives every output a shape fixed by
``(B, M, num_pages, max_slots)``: the slots go into ``max_slots``-long lists padded with -1, the
slot count stays on the device, and the whole plan is one ``plan_slots`` backend call. Its
numbering is ``plan_layout``'s, bitwise.

Host time is the cost here (the kernel is short), so the path is lean: metadata checks once, the
backend's bare launcher (on CUDA one C++ entry point that allocates every output, clears the
inverse and launches one kernel), the layout built from the returned tuple as it comes, and with
``validate`` a single read of three numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._checks import as_index, check_count, same_device
from ._contract import lengths_dtype
from ._dispatch import resolve
from ._layout import Layout, raise_for_status
from ._layout_budget import check_layout_budget
from .errors import LayoutError

__all__ = ["plan_layout_static"]

_WIDE = (torch.int32, torch.int64)


def _raw_index(
    req_pages: torch.Tensor, prefix: torch.Tensor, extend: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The index tensors as a bare ``plan_slots`` launcher takes them: contiguous, int32/int64,
    both lengths of one dtype (a no-op, no allocation, for what callers usually pass)."""
    if req_pages.dtype not in _WIDE:
        req_pages = req_pages.to(torch.int32)
    dtype = lengths_dtype(prefix)
    prefix, extend = prefix.to(dtype), extend.to(dtype)  # no-ops when they are already
    return req_pages.contiguous(), prefix.contiguous(), extend.contiguous()


def plan_layout_static(
    req_pages: torch.Tensor | Sequence[Sequence[int]],
    prefix_lens: torch.Tensor | Sequence[int],
    extend_lens: torch.Tensor | Sequence[int],
    page_size: int,
    num_pages: int,
    *,
    max_slots: int | None = None,
    num_tokens: int | None = None,
    dedup: bool = True,
    validate: bool = True,
    backend: str | None = None,
    max_bytes: int | None = None,
) -> Layout:
    """:func:`plan_layout` with shapes fixed by capacity: at most one host sync, capturable.

    Slot numbering, ``slot_table``, ``inverse``, ``req_pages`` and the lengths are exactly
    :func:`plan_layout`'s. The differences: ``slot_page`` and ``slot_owner`` have ``max_slots``
    entries, -1 from ``layout.used_slots`` on (padding slots, which no request uses and the
    kernels leave untouched), so ``layout.num_slots`` is the capacity; ``layout.used_slots`` and
    ``layout.status`` are (1,) int32 device tensors.

    Host syncs: ``validate=True`` reads the status, slot count and token count in one transfer
    and raises :func:`plan_layout`'s error on bad input. ``validate=False`` with ``num_tokens``
    given reads nothing back: the call is sync-free and can be captured in a CUDA graph (check
    later with :meth:`Layout.verify`). ``validate=False`` without ``num_tokens`` costs one sync.

    Streams: the CUDA backend carves the layout's tensors out of one allocation, so
    ``Tensor.record_stream`` on them does nothing; a reader on another stream waits on an event
    recorded after this call instead.

    Args:
        req_pages: (B, M) int32/int64 pool pages of each request in order; entries at
            ``j >= ceil(seq_lens[b] / P)`` are ignored (typically -1).
        prefix_lens: (B,) tokens already in the pool.
        extend_lens: (B,) current tokens (0 allowed).
        page_size: ``P``.
        num_pages: pool size.
        max_slots: slot capacity, ``B * M`` by default (always enough). ``sum(ceil(seq_lens /
            P))``, known on the host in a serving engine, is a tight bound; dedup needs fewer.
        num_tokens: ``sum(extend_lens)`` when the caller knows it on the host (as SGLang does);
            checked against the device value when ``validate``.
        dedup: share read-only slots across requests.
        validate: check the input and the capacity (one host sync).
        backend: force the backend of ``plan_slots`` (``torch``/``triton``/``cuda``).
        max_bytes: memory budget, as for :func:`plan_layout` (``$CPKV_LAYOUT_MAX_BYTES``, else
            what the device can host; a plan of at most 64 MiB, or one made while a CUDA graph is
            captured, asks the device nothing). Checked from the shapes: no host sync.

    Returns:
        A frozen padded :class:`Layout` on ``req_pages``'s device.

    Raises:
        LayoutError: with ``validate``, everything :func:`plan_layout` raises, a capacity that
            is too small, or a ``num_tokens`` that disagrees; without, only metadata errors
            (shapes, dtypes, devices, counts). Always: a plan over the budget, before anything of
            its size is allocated.
    """
    page_size = check_count(page_size, "page_size", 1)
    num_pages = check_count(num_pages, "num_pages", 1)
    req_pages = as_index(req_pages, "req_pages", 2)
    device = req_pages.device
    prefix = as_index(prefix_lens, "prefix_lens", 1, device)
    extend = as_index(extend_lens, "extend_lens", 1, device)
    if prefix.device != device or extend.device != device:
        same_device(req_pages=req_pages, prefix_lens=prefix, extend_lens=extend)  # raises
    bsz, max_pages = req_pages.shape
    if prefix.shape[0] != bsz or extend.shape[0] != bsz:
        name, lens = ("prefix_lens", prefix) if prefix.shape[0] != bsz else ("extend_lens", extend)
        raise LayoutError(
            f"{name} has {lens.shape[0]} entries but req_pages has {bsz} rows (requests); "
            f"fix: pass one length per request"
        )
    max_slots = bsz * max_pages if max_slots is None else check_count(max_slots, "max_slots", 0)
    if num_tokens is not None:
        num_tokens = check_count(num_tokens, "num_tokens", 0)
    check_layout_budget("plan_layout_static", req_pages, num_pages, max_slots, max_bytes)

    dedup = bool(dedup)
    chosen = resolve("plan_slots", device, backend)
    plan = chosen.raw_ops.get("plan_slots")
    if plan is None:  # the contract op, which checks and converts its arguments itself
        plan = chosen.ops["plan_slots"]
    else:  # the bare launcher: hand it what it takes (the checks above are the only ones)
        req_pages, prefix, extend = _raw_index(req_pages, prefix, extend)
    out = plan(req_pages, prefix, extend, page_size, num_pages, max_slots, dedup)
    info = out[11]
    host = info.tolist() if validate or num_tokens is None else None  # the one host sync
    layout = Layout(
        page_size,
        num_pages,
        dedup,
        *out[:9],  # req_pages .. inverse, in Layout's field order (the plan_slots contract)
        host[2] if num_tokens is None else num_tokens,
        out[9],
        out[10],
    )
    if validate:
        needed, status, tokens = host
        if status:
            raise_for_status(layout, status, needed)
        if num_tokens is not None and num_tokens != tokens:
            raise LayoutError(
                f"num_tokens = {num_tokens} but sum(extend_lens) = {tokens}; fix: pass the "
                f"batch's current token count, or None"
            )
    return layout
