"""Launch parameters shared by the Triton ops."""

from __future__ import annotations

import torch

from .._bytes import next_pow2

# Elements one program handles: small tiles keep many programs in flight on a GPU; under
# TRITON_INTERPRET=1 (CPU tensors) every program costs Python time, so tiles grow.
GPU_TILE = 4096
CPU_TILE = 1 << 16


def tile_budget(t: torch.Tensor) -> int:
    return CPU_TILE if t.device.type == "cpu" else GPU_TILE


def tile_2d(rows: int, cols: int, budget: int, max_cols: int = 2048) -> tuple[int, int]:
    """(ROWS, COLS) powers of two with ROWS * COLS <= budget over a rows x cols grid.

    On a GPU the tile depends on the row width only (one compiled variant per width, not per
    batch); the interpreter trims ROWS to the problem, since masked lanes cost it time.
    """
    c = min(next_pow2(cols), max_cols, budget)
    r = max(1, budget // c)
    if budget == CPU_TILE:
        r = min(r, next_pow2(rows))
    return r, c
