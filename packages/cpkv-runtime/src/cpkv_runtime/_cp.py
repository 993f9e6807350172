"""Context-parallel split of a multi-request batch of current tokens, and its way back.

Strategies (docs/design.md, "CP split"; the rules and their upstream reference are in
``_cp_rows``):

- ``zigzag``: each request is cut into ``2*cp`` blocks, the first ``n mod 2cp`` of them one token
  longer; rank r takes blocks ``r`` and ``2*cp-1-r`` of every request (balances causal attention
  work per request, so it holds at batch size > 1). A rank's rows: block r of requests 0..B-1,
  then block ``2*cp-1-r`` of requests 0..B-1 (SGLang's order).
- ``interleave``: flattened token i goes to rank ``i % cp``.

Every rank holds the same number of rows ``local_len``, SGLang 0.5.23's physical per-rank length
(the longest rank's real rows rounded up to ``2*cp`` for zigzag, ``cp`` for interleave); padding
rows follow a rank's real rows and are masked (``valid``). After an all-gather of per-rank rows
(rank-major, ``cp * local_len`` rows) :func:`gather_order` restores the global token order and
:func:`localize` selects one rank's rows again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ._bytes import word_rows
from ._checks import as_index, check_count, first_true, same_device
from ._cp_budget import check_budget
from ._cp_rows import interleave_rows, zigzag_rows
from .errors import LayoutError

__all__ = ["CPSplit", "cp_split", "gather_order", "localize"]

STRATEGIES = ("zigzag", "interleave")


@dataclass(frozen=True, eq=False)
class CPSplit:
    """How the ``T`` current tokens of a batch are spread over ``cp_size`` ranks.

    Attributes:
        cp_size: number of ranks.
        strategy: ``"zigzag"`` or ``"interleave"``.
        num_tokens: ``T``, real tokens in global (request-major) order.
        local_len: ``L``, rows per rank, padding included (same on every rank): SGLang's
            physical per-rank length (0 for an empty batch, ``T`` at ``cp_size`` 1).
        rows: (cp_size, L) int64 global token index of each rank's row, -1 = padding.
        valid: (cp_size, L) bool, False on padding rows.
        inverse_perm: (T,) int64 where global token t sits in the rank-major all-gathered rows
            (``gathered[inverse_perm] ==`` global order).
        companions: each companion ``[T, ...]`` as ``(cp_size, L, ...)``, padding rows filled with
            -1 (signed integer dtypes) or zero bytes (others). SGLang pads with zeros
            everywhere; -1 keeps a padded ``out_cache_loc`` or ``token_req`` row recognisable.
    """

    cp_size: int
    strategy: str
    num_tokens: int
    local_len: int
    rows: torch.Tensor
    valid: torch.Tensor
    inverse_perm: torch.Tensor
    companions: tuple[torch.Tensor, ...]

    @property
    def padded_len(self) -> int:
        """``cp_size * local_len``: rows after an all-gather."""
        return self.cp_size * self.local_len

    def local(self, rank: int) -> tuple[torch.Tensor, ...]:
        """Rank ``rank``'s slice of every companion, ``(L, ...)`` each."""
        rank = _check_rank(rank, self)
        return tuple(c[rank] for c in self.companions)


def _check_rank(rank: int, split: CPSplit) -> int:
    rank = check_count(rank, "rank", 0)
    if rank >= split.cp_size:
        raise LayoutError(f"rank {rank} is out of range for cp_size {split.cp_size}")
    return rank


_SIGNED_INTS = (torch.int8, torch.int16, torch.int32, torch.int64)


def _take_rows(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``out[i] = src[index[i]]`` as opaque rows; ``index -1`` gives a padding row.

    Padding is -1 in signed integer tensors (a padded ``out_cache_loc`` is skipped downstream),
    zero bytes otherwise. Rows move as raw words, so any dtype works (float8 included).
    """
    out = torch.empty((*index.shape, *src.shape[1:]), dtype=src.dtype, device=src.device)
    out_w, src_w = word_rows(out, index.dim()), word_rows(src, 1)
    if src_w is None or out_w is None or src_w.dtype != out_w.dtype:
        src = src.contiguous()
        out_w, src_w = word_rows(out, index.dim()), word_rows(src, 1)
    if src.dtype in _SIGNED_INTS:
        out.fill_(-1)
    else:
        out_w.zero_()
    keep = index >= 0
    out_w[keep] = src_w[index[keep]]
    return out


def cp_split(
    extend_lens: torch.Tensor | Sequence[int],
    cp_size: int,
    *companions: torch.Tensor,
    strategy: Literal["zigzag", "interleave"] = "zigzag",
    max_bytes: int | None = None,
) -> CPSplit:
    """Split a batch's current tokens over ``cp_size`` ranks, carrying companion tensors along.

    Args:
        extend_lens: (B,) current tokens per request (0 allowed); tokens are request-major.
        cp_size: number of CP ranks (>= 1).
        *companions: any number of ``[T, ...]`` tensors (``token_req``, ``token_pos``,
            ``out_cache_loc``, current KV, ...) permuted the same way. Padding rows get -1 in
            signed integer tensors (so a padded ``out_cache_loc`` row is skipped by fill_current).
        strategy: ``"zigzag"`` (``2*cp_size`` blocks per request) or ``"interleave"`` (token
            i on rank ``i % cp_size``). Rows per rank: the longest rank's tokens rounded up to
            a multiple of ``2*cp_size`` (zigzag) or ``cp_size`` (interleave).
        max_bytes: memory budget of the split (padded rows, companion copies, zigzag block
            tables). Default: ``$CPKV_CP_SPLIT_MAX_BYTES``, else what the device can host now
            (CUDA: free plus cached-unused memory; CPU: ``MemAvailable``). The padded size is
            ``cp_size * local_len`` rows, at least ``2 * cp_size**2`` for zigzag on one token.

    Returns:
        A :class:`CPSplit`; rank r computes ``split.local(r)``.

    Raises:
        LayoutError: bad input, or a split over the budget; both before any tensor of the
            split's size is allocated (``_cp_budget`` works the size out from the lengths).

    Every rank gets exactly the tokens SGLang 0.5.23's strategy of that name gives it, in the
    same order. SGLang itself splits only batches whose requests all have ``>= 2*cp_size`` tokens
    (zigzag) or that have ``>= cp_size`` tokens (interleave), and nothing at ``cp_size`` 1; this
    splits any batch by the same rule (empty and 1-token requests included), and returns the
    identity split at ``cp_size`` 1.
    """
    cp = check_count(cp_size, "cp_size", 1)
    if strategy not in STRATEGIES:
        raise LayoutError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    for i, comp in enumerate(companions):
        if not isinstance(comp, torch.Tensor):
            raise LayoutError(
                f"companion {i} is a {type(comp).__name__}, not a tensor; pass strategy= by "
                f"keyword and companions as [T, ...] tensors"
            )
    device = companions[0].device if companions else None
    extend = as_index(extend_lens, "extend_lens", 1, device)
    bad = first_true(extend < 0)
    if bad is not None:
        raise LayoutError(f"extend_lens[{bad[0]}] = {int(extend[bad])} is negative")
    if companions:
        same_device(**{f"companion {i}": c for i, c in enumerate(companions)})
        extend = extend.to(device)
    extend = extend.long()
    total = int(extend.sum())
    for i, comp in enumerate(companions):
        if comp.dim() == 0 or comp.shape[0] != total:
            raise LayoutError(
                f"companion {i} has shape {tuple(comp.shape)} but the batch has T = "
                f"sum(extend_lens) = {total} tokens; companions are [T, ...]"
            )
    check_budget(extend, total, cp, strategy, companions, max_bytes)
    if strategy == "zigzag":
        rows = zigzag_rows(extend, total, cp)
    else:
        rows = interleave_rows(total, cp, extend.device)
    valid = rows >= 0
    flat = rows.reshape(-1)
    inverse_perm = torch.empty(total, dtype=torch.long, device=rows.device)
    keep = torch.nonzero(flat >= 0).squeeze(1)
    inverse_perm[flat[keep]] = keep
    carried = []
    for comp in companions:
        carried.append(_take_rows(comp, rows))
    return CPSplit(
        cp_size=cp,
        strategy=strategy,
        num_tokens=total,
        local_len=rows.shape[1],
        rows=rows,
        valid=valid,
        inverse_perm=inverse_perm,
        companions=tuple(carried),
    )


def gather_order(gathered: torch.Tensor | Sequence[torch.Tensor], split: CPSplit) -> torch.Tensor:
    """Put all-gathered per-rank rows back in global token order, dropping padding.

    Args:
        gathered: ``(cp_size * L, ...)`` rank-major (as ``all_gather_into_tensor`` writes it),
            ``(cp_size, L, ...)``, or a list of ``cp_size`` tensors ``(L, ...)`` (``all_gather``).

    Returns:
        (T, ...) rows in global (request-major) token order.
    """
    if not isinstance(gathered, torch.Tensor):
        parts = list(gathered)
        if len(parts) != split.cp_size:
            raise LayoutError(f"gather_order got {len(parts)} tensors for cp_size {split.cp_size}")
        gathered = torch.cat(parts)
    elif gathered.dim() >= 2 and tuple(gathered.shape[:2]) == (split.cp_size, split.local_len):
        gathered = gathered.reshape(split.padded_len, *gathered.shape[2:])
    if gathered.dim() == 0 or gathered.shape[0] != split.padded_len:
        raise LayoutError(
            f"gather_order expects cp_size * local_len = {split.cp_size} * {split.local_len} = "
            f"{split.padded_len} all-gathered rows, got shape {tuple(gathered.shape)}"
        )
    return gathered[split.inverse_perm.to(gathered.device)]


def localize(
    rows: torch.Tensor,
    split: CPSplit,
    rank: int,
    *,
    order: Literal["global", "gathered"] = "global",
) -> torch.Tensor:
    """Select rank ``rank``'s compute rows again from rows that cover the whole batch.

    After the all-gather every rank holds all ``T`` current rows; consumers of the rank's own rows
    (its cache write, its queries) expect ``L`` rows, not ``T`` or ``cp_size * L``.

    Args:
        rows: ``(T, ...)`` in global order (``order="global"``, e.g. from :func:`gather_order`),
            or ``(cp_size * L, ...)`` all-gathered rank-major (``order="gathered"``).
        split: the split the rows came from.
        rank: this rank.
        order: which of the two layouts ``rows`` has.

    Returns:
        (L, ...) this rank's rows; padding rows are -1 (signed integer dtypes) or zero bytes.
    """
    rank = _check_rank(rank, split)
    if order == "gathered":
        if rows.dim() == 0 or rows.shape[0] != split.padded_len:
            raise LayoutError(
                f"localize(order='gathered') expects cp_size * local_len = {split.padded_len} "
                f"rows, got shape {tuple(rows.shape)}"
            )
        return rows[rank * split.local_len : (rank + 1) * split.local_len]
    if order != "global":
        raise LayoutError(f"order must be 'global' or 'gathered', got {order!r}")
    if rows.dim() == 0 or rows.shape[0] != split.num_tokens:
        hint = (
            "; these look all-gathered (rank-major): pass order='gathered' or gather_order() first"
            if rows.dim() and rows.shape[0] == split.padded_len
            else ""
        )
        raise LayoutError(
            f"localize expects the batch's T = {split.num_tokens} rows in global order and "
            f"returns rank {rank}'s {split.local_len}; got shape {tuple(rows.shape)}{hint}"
        )
    return _take_rows(rows, split.rows[rank].to(rows.device))
