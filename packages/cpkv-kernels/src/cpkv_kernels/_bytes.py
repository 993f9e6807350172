"""Views of tensors as rows of opaque machine words, for the Triton kernels.

Rows (pool pages, dense pages, current-KV rows) are opaque bytes of any dtype. The Triton kernels
copy them as the widest word (int32, int16 or uint8) that divides the row width, every row stride
and every base address involved, and tell the compiler how many consecutive words stay 16-byte
aligned (``vec``), so that it emits 16-byte loads and stores where the layout allows and plain
narrow ones (never a wrong tail) where it does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from cpkv_runtime._bytes import row_contiguous  # one definition of "a row is one block"

from .errors import KernelInputError

_DTYPES = {4: torch.int32, 2: torch.int16, 1: torch.uint8}


@dataclass(frozen=True)
class ByteRows:
    """A tensor's leading-dim rows as raw bytes.

    Attributes:
        raw: ``(n, row_bytes)`` uint8 view sharing storage with the source.
        row_bytes: bytes per leading-dim row (everything after dim 0).
        stride: bytes between consecutive rows (any value: pools may be slices).
    """

    raw: torch.Tensor
    row_bytes: int
    stride: int

    @property
    def addr(self) -> int:
        return self.raw.data_ptr()


def byte_rows(t: torch.Tensor, name: str) -> ByteRows:
    """View ``t`` (n, *inner) as ``(n, inner_bytes)`` uint8 rows without copying.

    Raises:
        KernelInputError: when the dims after the first are not contiguous.
    """
    if not row_contiguous(t, 1):
        raise KernelInputError(
            f"{name} must be contiguous after its first dim (rows are copied as raw bytes); "
            f"got shape {tuple(t.shape)} strides {t.stride()}: pass {name}.contiguous()"
        )
    es = t.element_size()
    row_bytes, stride = math.prod(t.shape[1:]) * es, t.stride(0) * es
    raw = t.unsqueeze(-1).view(torch.uint8)  # (n, *inner, es): same storage, as bytes
    raw = raw.as_strided((t.shape[0], row_bytes), (stride, 1), raw.storage_offset())
    return ByteRows(raw, row_bytes, stride)


def word_width(*values: int) -> int:
    """Widest word (4, 2 or 1 bytes) dividing every value (widths, strides, addresses)."""
    for width in (4, 2):
        if all(v % width == 0 for v in values):
            return width
    return 1


def vec_words(width: int, *values: int) -> int:
    """Words of ``width`` bytes per aligned group (<= 16 bytes) that divides every value."""
    vec = 16 // width
    while vec > 1 and any(v % (vec * width) for v in values):
        vec //= 2
    return vec


def copy_words(row_bytes: int, *views: ByteRows) -> tuple[int, int]:
    """``(width, vec)`` for copying rows of ``row_bytes`` between ``views``: the widest word that
    divides the row width and every view's stride and address, and the words per aligned group."""
    sizes = (row_bytes, *(v.stride for v in views), *(v.addr for v in views))
    width = word_width(*sizes)
    return width, vec_words(width, *sizes)


def as_words(rows: ByteRows, width: int) -> torch.Tensor:
    """``rows.raw`` reinterpreted as words of ``width`` bytes: ``(n, row_bytes // width)``."""
    return rows.raw if width == 1 else rows.raw.view(_DTYPES[width])


def next_pow2(n: int) -> int:
    """Smallest power of two >= max(n, 1)."""
    return 1 << max(0, (max(n, 1) - 1).bit_length())
