"""Input validation shared by every public op: clear :class:`LayoutError` before any work.

Each message names the tensor, what was expected, what was found, and the fix.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import torch

from .errors import LayoutError

__all__ = [
    "any_true",
    "as_index",
    "check_count",
    "check_row_shape",
    "first_true",
    "raise_first",
    "same_device",
    "snippet",
]

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def as_index(
    x: torch.Tensor | Sequence[object],
    name: str,
    dims: int | tuple[int, ...],
    device: torch.device | None = None,
) -> torch.Tensor:
    """Check that ``x`` is an integer index tensor with ``dims`` dims; lists are converted.

    Args:
        x: a tensor, or a (nested) list of Python ints (put on ``device`` when given).
        name: the argument name used in error messages.
        dims: the allowed number(s) of dimensions.
        device: where a converted list goes.
    """
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x, device=device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise LayoutError(
                f"{name} must be an integer tensor; could not convert: {exc}"
            ) from exc
        if x.numel() == 0:  # torch.as_tensor([]) is float32; an empty list holds no non-integer
            x = x.long()
    if x.dtype not in _INT_DTYPES:
        raise LayoutError(
            f"{name} must hold integer indices (int32 or int64), got {x.dtype}; "
            f"fix: pass integer indices, e.g. {name}.to(torch.int32)"
        )
    allowed = (dims,) if isinstance(dims, int) else dims
    if x.dim() not in allowed:
        want = " or ".join(f"{d}-D" for d in allowed)
        raise LayoutError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    return x


def check_count(value: object, name: str, minimum: int) -> int:
    """A Python int ``>= minimum`` (bools and floats rejected)."""
    if type(value) is int and value >= minimum:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LayoutError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise LayoutError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def same_device(**tensors: torch.Tensor | None) -> torch.device:
    """The one device every given tensor lives on; mixed devices raise."""
    named = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = named[0]
    for name, tensor in named[1:]:
        if tensor.device != first.device:
            raise LayoutError(
                f"{name} is on {tensor.device} but {first_name} is on {first.device}; "
                f"fix: move every input to one device"
            )
    return first.device


def check_row_shape(
    name: str, tensor: torch.Tensor, lead: int, ref_name: str, ref: torch.Tensor, ref_lead: int
) -> None:
    """``tensor``'s rows (dims >= lead) must match ``ref``'s rows in shape and dtype."""
    if tuple(tensor.shape[lead:]) != tuple(ref.shape[ref_lead:]) or tensor.dtype != ref.dtype:
        raise LayoutError(
            f"{name} rows are {tuple(tensor.shape[lead:])} {tensor.dtype} but {ref_name} rows are "
            f"{tuple(ref.shape[ref_lead:])} {ref.dtype}; rows are copied as raw bytes, so both "
            f"must have one row shape and dtype"
        )


def any_true(*masks: torch.Tensor | None) -> bool:
    """Whether any of ``masks`` (None = skipped) holds a True: one host sync for all of them.

    Value checks compute their masks, ask this once, and look for the culprit (one sync per mask)
    only when something is wrong, so valid input costs one sync however many checks there are.
    """
    flat = [m.reshape(-1) for m in masks if m is not None]
    return bool(torch.cat(flat).any()) if flat else False


def first_true(mask: torch.Tensor) -> tuple[int, ...] | None:
    """Index of the first True of ``mask`` (row-major), or None; one host sync."""
    hits = torch.nonzero(mask)
    if hits.shape[0] == 0:
        return None
    return tuple(int(v) for v in hits[0].tolist())


def raise_first(mask: torch.Tensor | None, message: Callable[[tuple[int, ...]], str]) -> None:
    """Raise ``LayoutError(message(index))`` at the first True of ``mask`` (None: no check)."""
    bad = None if mask is None else first_true(mask)
    if bad is not None:
        raise LayoutError(message(bad))


def snippet(values: Sequence[int], end: int, width: int = 3) -> str:
    """``[.., a, b, c]``: the ``width`` values ending at index ``end`` (inclusive)."""
    start = max(0, end + 1 - width)
    body = ", ".join(str(v) for v in values[start : end + 1])
    return f"[.., {body}]" if start > 0 else f"[{body}]"
