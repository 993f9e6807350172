"""The memory :func:`cpkv_runtime.cp_split` will allocate, known and bounded before it allocates.

The split's size is not the batch's: every rank holds ``local_len`` rows, so the padded rows are
``cp_size * local_len``, at least ``cp_size * 2 * cp_size`` (zigzag) or ``cp_size**2``
(interleave) for a batch of one token. ``cp_size=10**6`` on one token would ask for 2e12 rows. So
the bytes are bounded from below (``local_len >= 2 * cp_size``) and from above (a rank holds at
most all ``T`` tokens) without reading the lengths; between the two, the exact ``local_len`` is
worked out in O(B + cp_size) from the lengths alone. A split over the budget raises
:class:`LayoutError` naming the sizes, the budget and where it came from, before any tensor of the
split's size exists.

Estimate (counted from the code, each an upper bound on tensors alive at once):

- ``ROW_BYTES`` = 96 per padded row: the row table, its column, segment and token temporaries
  and the kept-row index (int64 each) and two bool masks. Measured on CPU (peak RSS of a 2M-token
  split): 48 bytes a row for zigzag, 35 for interleave; 96 leaves room for allocator slack;
- per padded row, each companion's row bytes (its padded copy), plus the largest companion's row
  bytes once more (the gather that fills a copy);
- ``BLOCK_BYTES`` = 64 per zigzag block entry, ``2 * cp_size * B`` of them: the ``(B, 2*cp_size)``
  block sizes and starts and their per-rank ``(cp_size, 2B)`` rearrangements;
- ``RANK_BYTES`` = 64 per rank (per-rank counts and picks).

Budget, first set wins (see ``_budget``): the ``max_bytes=`` argument; ``CPKV_CP_SPLIT_MAX_BYTES``
(bytes); else what the device can host now (CUDA free + cached memory, CPU ``MemAvailable``).
"""

from __future__ import annotations

import math

import torch

from ._budget import count, gib, resolve_budget
from ._cp_rows import round_up
from .errors import LayoutError

__all__ = ["ENV", "check_budget", "padded_local_len"]

ENV = "CPKV_CP_SPLIT_MAX_BYTES"
ROW_BYTES = 96
BLOCK_BYTES = 64
RANK_BYTES = 64


def padded_local_len(extend: torch.Tensor, total: int, cp: int, strategy: str) -> int:
    """``local_len`` of the split, exactly as ``zigzag_rows``/``interleave_rows`` will make it.

    Zigzag: rank r holds ``2 * base_b + [r < e_b] + [2cp - 1 - r < e_b]`` tokens of request b
    (``base_b, e_b = divmod(n_b, 2cp)``); both indicator counts over all requests come from one
    ``bincount`` each, so this costs O(B + cp), not O(B * cp).
    """
    if cp == 1 or total == 0:
        return total if cp == 1 else 0
    if strategy == "interleave":
        return round_up(-(-total // cp), cp)
    blocks = 2 * cp
    base, extra = torch.div(extend, blocks, rounding_mode="floor"), extend % blocks
    lead = torch.bincount(extra.clamp(max=cp), minlength=cp + 1).cumsum(0)[:cp]  # #{e_b <= r}
    tail = torch.bincount((blocks - extra).clamp(max=cp), minlength=cp + 1).cumsum(0)[:cp]
    per_rank = 2 * base.sum() + (extend.numel() - lead) + tail
    return round_up(int(per_rank.max()), blocks)


def check_budget(
    extend: torch.Tensor,
    total: int,
    cp: int,
    strategy: str,
    companions: tuple[torch.Tensor, ...],
    max_bytes: int | None,
) -> None:
    """Raise :class:`LayoutError` if the split would allocate more than the budget."""
    budget, source = resolve_budget(extend.device, max_bytes, ENV)
    if budget is None:
        return
    row_bytes = [math.prod(c.shape[1:]) * c.element_size() for c in companions]
    per_row = ROW_BYTES + sum(row_bytes) + max(row_bytes, default=0)
    batch = extend.numel()
    blocks = 2 * cp * batch if strategy == "zigzag" and cp > 1 and total > 0 else 0
    fixed = blocks * BLOCK_BYTES + cp * RANK_BYTES
    # a lower bound first: the exact length needs O(cp_size) memory, which may itself be too much
    align = (2 * cp if strategy == "zigzag" else cp) if cp > 1 and total > 0 else 0
    if cp * align * per_row + fixed > budget:
        _refuse(cp, strategy, total, batch, align, blocks, cp * align * per_row + fixed, budget,
                source, at_least=True)  # fmt: skip
    # an upper bound next (a rank holds at most every token): it needs no pass over the lengths,
    # so an ordinary split on CUDA pays no extra host sync for the check
    if cp * round_up(total, max(align, 1)) * per_row + fixed <= budget:
        return
    local_len = padded_local_len(extend, total, cp, strategy)
    need = cp * local_len * per_row + fixed
    if need > budget:
        _refuse(cp, strategy, total, batch, local_len, blocks, need, budget, source)


def _refuse(
    cp: int,
    strategy: str,
    total: int,
    batch: int,
    local_len: int,
    blocks: int,
    need: int,
    budget: int,
    source: str,
    *,
    at_least: bool = False,
) -> None:
    rows = f"cp_size * local_len = {cp:,} * {local_len:,} = {cp * local_len:,} padded rows"
    if blocks:
        rows += f", 2 * cp_size * B = {blocks:,} zigzag block entries"
    rows += f", {cp:,} per-rank entries"
    size = ("at least " if at_least else "") + gib(need)
    raise LayoutError(
        f"cp_split(cp_size={cp}, strategy={strategy!r}) of {count(total, 'token')} in "
        f"{count(batch, 'request')} would allocate {size} ({rows}), over the budget of "
        f"{gib(budget)} ({source}); fix: lower cp_size or split the batch, or raise the budget "
        f"with max_bytes= or {ENV}"
    )
