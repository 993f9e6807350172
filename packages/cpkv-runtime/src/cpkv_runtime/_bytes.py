"""Opaque rows: view any tensor's rows as machine words so copies never look at the dtype.

KV rows are raw bytes to the runtime (bf16 576-wide latent = 1152 bytes, fp8 rows with their
scales = 656 bytes as uint8, indexer rows = 132 bytes). Moving them as the widest integer word that
divides the row (int64 for 1152/656, int32 for 132) keeps ``index_select``/``index_copy_`` fast and
works for dtypes that have no copy kernels of their own (float8 on some devices, bool).
"""

from __future__ import annotations

import math

import torch

_WORDS: tuple[torch.dtype, ...] = (torch.int64, torch.int32, torch.int16, torch.uint8)


def row_contiguous(x: torch.Tensor, lead: int) -> bool:
    """True when each of x's rows (dims >= lead) is one contiguous block of memory."""
    expected = 1
    for size, stride in zip(reversed(x.shape[lead:]), reversed(x.stride()[lead:]), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def word_rows(x: torch.Tensor, lead: int) -> torch.Tensor | None:
    """View ``x`` as ``(*x.shape[:lead], W)`` integer words, one row per leading index.

    Args:
        x: any dtype; dims ``>= lead`` form one opaque row that must be contiguous in memory
            (the leading dims may have any stride).
        lead: number of leading (indexing) dims.

    Returns:
        A view sharing ``x``'s storage (writes go through), or ``None`` when the memory layout
        does not allow one (callers then fall back to dtype-level indexing).
    """
    if not row_contiguous(x, lead):
        return None
    while x.dim() > lead and x.shape[-1] == 1:  # size-1 row dims may carry any stride
        x = x.squeeze(-1)
    x = x.unsqueeze(-1)  # rows now end in a stride-1 dim (a size-1 one when they were scalars)
    esize = x.element_size()
    nbytes = math.prod(x.shape[lead:]) * esize
    if x.numel() == 0:  # nothing to move; any correctly shaped word tensor will do
        return torch.empty((*x.shape[:lead], nbytes), dtype=torch.uint8, device=x.device)
    byte_strides = [s * esize for s in x.stride()[:lead]]
    offset = x.storage_offset() * esize
    for word in _WORDS:
        wsize = torch.empty((), dtype=word).element_size()
        if nbytes % wsize or offset % wsize or any(s % wsize for s in byte_strides):
            continue
        try:
            xb = x.view(torch.uint8) if x.dtype != torch.uint8 else x
            flat = xb.view(*xb.shape[:lead], -1)
            return flat.view(word) if word != torch.uint8 else flat
        except RuntimeError:  # a dtype or layout that refuses the view: try a narrower word
            continue
    return None


def row_bytes(x: torch.Tensor, lead: int) -> int:
    """Bytes in one row of ``x`` (dims ``>= lead``)."""
    return math.prod(x.shape[lead:]) * x.element_size()


def byte_rows(x: torch.Tensor, lead: int) -> torch.Tensor:
    """``x`` as ``(*lead_shape, row_bytes)`` uint8 (a copy only when rows are not contiguous).

    For bitwise comparison of opaque rows (``torch.equal`` on floats treats -0 == 0, NaN != NaN).
    """
    rows = word_rows(x, lead)
    rows = rows if rows is not None else word_rows(x.contiguous(), lead)
    assert rows is not None  # a contiguous tensor always has a byte view
    return rows.view(torch.uint8)
