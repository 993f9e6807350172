"""Which tokens each CP rank computes, in which order, and how many rows it pads to.

The rules are SGLang 0.5.23's context-parallel strategies, held equal to them (every rank's
tokens, their order and the padded length) by the differential test
``packages/sglang-integration/tests/test_upstream_cp_split.py``, which calls SGLang's own
strategies (docs/design.md, "CP split").

- **zigzag**: request b of ``n_b`` tokens is cut into ``2*cp`` blocks; block k holds
  ``n_b // 2cp + (k < n_b % 2cp)`` tokens, so the first ``n_b mod 2cp`` blocks carry one extra
  token (padding never piles into the last blocks). Rank r computes blocks r ("prev") and
  ``2cp-1-r`` ("next") of every request, in the order: the prev blocks of requests 0..B-1, then
  their next blocks. That is SGLang's order (its attention runs all prev blocks as one varlen
  call and all next blocks as a second), so a rank's rows line up with SGLang's row for row.
- **interleave**: flattened token t goes to rank ``t % cp``, in increasing t.

Padded length: the largest real row count over the ranks, rounded up to a multiple of ``2*cp``
(zigzag) or ``cp`` (interleave), SGLang's physical per-rank length; a rank's padding rows follow
its real rows.

Where SGLang would not split:

- ``cp == 1``: SGLang binds no strategy and runs without CP. The split is the identity, unpadded.
- short batches: SGLang applies zigzag only when every request has ``>= 2*cp`` tokens and
  interleave only when the batch has ``>= cp`` tokens; otherwise the whole batch runs without CP.
  We split every batch (requests of 0 or 1 tokens included) by the same block rule; a short
  request just leaves some of its blocks empty. The rows are what SGLang's ``build_metadata``
  computes for those lengths.
"""

from __future__ import annotations

import torch

__all__ = ["interleave_rows", "round_up", "zigzag_rows"]


def round_up(n: int, align: int) -> int:
    """``n`` rounded up to a multiple of ``align`` (>= 1)."""
    return -(-n // align) * align


def _identity(total: int, device: torch.device) -> torch.Tensor:
    return torch.arange(total, device=device).unsqueeze(0)


def zigzag_rows(extend: torch.Tensor, total: int, cp: int) -> torch.Tensor:
    """(cp, L) global token index of each rank's rows, -1 = padding.

    Args:
        extend: (B,) int64 tokens per request, request-major; ``total = sum(extend)``.

    Vectorised over requests (no Python loop over the batch): each output row looks up its
    segment among the rank's ``2B`` blocks, O(T log B + cp * B) work.
    """
    device = extend.device
    if cp == 1:
        return _identity(total, device)
    if total == 0:
        return torch.full((cp, 0), -1, dtype=torch.long, device=device)
    blocks = 2 * cp
    k = torch.arange(blocks, device=device)
    base = torch.div(extend, blocks, rounding_mode="floor").unsqueeze(1)
    extra = (extend % blocks).unsqueeze(1)
    size = base + (k < extra).long()  # (B, 2cp) tokens of block k
    req_first = (torch.cumsum(extend, 0) - extend).unsqueeze(1)
    first = req_first + k * base + torch.minimum(k, extra)  # (B, 2cp) global first token
    rank = torch.arange(cp, device=device)
    pick = torch.stack((rank, blocks - 1 - rank), 1)  # (cp, 2): prev and next block of rank r
    # rank r's segments in its row order: (prev/next, request) -> (cp, 2B)
    seg_size = size[:, pick].permute(1, 2, 0).reshape(cp, -1)
    seg_first = first[:, pick].permute(1, 2, 0).reshape(cp, -1)
    seg_end = torch.cumsum(seg_size, 1)  # column after each segment
    per_rank = seg_end[:, -1]  # real rows per rank (SGLang's logical tokens)
    local_len = round_up(int(per_rank.max()), blocks)
    col = torch.arange(local_len, device=device).expand(cp, local_len).contiguous()
    # the segment holding each column; right=True steps over empty segments
    seg = torch.searchsorted(seg_end, col, right=True).clamp_max(seg_end.shape[1] - 1)
    seg_col = torch.gather(seg_end, 1, seg) - torch.gather(seg_size, 1, seg)
    token = torch.gather(seg_first, 1, seg) + col - seg_col
    return torch.where(col < per_rank.unsqueeze(1), token, -1)


def interleave_rows(total: int, cp: int, device: torch.device) -> torch.Tensor:
    """(cp, L) global token index of each rank's rows, -1 = padding: token t on rank t % cp."""
    if cp == 1:
        return _identity(total, device)
    local_len = round_up(-(-total // cp), cp)
    rows = torch.arange(local_len, device=device).unsqueeze(0) * cp
    rows = rows + torch.arange(cp, device=device).unsqueeze(1)
    return torch.where(rows < total, rows, -1)
