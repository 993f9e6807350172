"""Bitwise comparison that names the first mismatching row (DeepGEMM's assert_bitwise_equal)."""

from __future__ import annotations

import torch


def as_bytes(x: torch.Tensor, lead: int) -> torch.Tensor:
    """``x`` as ``(*x.shape[:lead], row_bytes)`` uint8 (a copy: comparison only)."""
    x = x.contiguous()
    if x.numel() == 0:  # reshape(..., -1) cannot infer a width from no elements
        return torch.empty((*x.shape[:lead], 0), dtype=torch.uint8)
    return x.unsqueeze(-1).view(torch.uint8).reshape(*x.shape[:lead], -1)


def assert_bitwise_equal(
    name: str, got: torch.Tensor, want: torch.Tensor, lead: int, what: str
) -> None:
    """Raise naming the first ``what`` index (e.g. ``(slot, row)``) whose bytes differ."""
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    g, w = as_bytes(got, lead).cpu(), as_bytes(want, lead).cpu()
    diff = (
        (g != w).reshape(*g.shape[:lead], -1).any(-1)
        if g.numel()
        else torch.zeros(0, dtype=torch.bool)
    )
    if diff.any():
        first = tuple(int(v) for v in torch.nonzero(diff)[0])
        count = int(diff.sum())
        raise AssertionError(
            f"{name}: {count} {what} rows differ; first at {what}={first}: "
            f"got {g[first][:16].tolist()}.. want {w[first][:16].tolist()}.."
        )
