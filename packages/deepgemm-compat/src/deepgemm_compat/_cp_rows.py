"""Rows a prefill-CP rank runs through its dense GEMMs, by SGLang 0.5.23's CP strategies.

For one forward with extend lengths ``L_b`` (``T = sum L_b`` tokens), SGLang
(``sglang/srt/layers/cp``) gives each rank:

* **interleave**: ``T // cp + (r < T % cp)`` rows; it applies when ``T >= cp``.
* **zigzag**: each request is cut into ``2cp`` blocks of ``L // 2cp + (k < L % 2cp)`` tokens and
  rank ``r`` takes blocks ``r`` and ``2cp - 1 - r`` of every request; it applies only when every
  ``L_b >= 2cp``.
* the physical length of every rank is the largest logical one rounded up to ``2cp`` (zigzag) or
  ``cp`` (interleave) (``pad_logical_token_to_physical``).
* a forward the strategy does not apply to runs **without CP**: every rank holds all ``T`` rows.
  Under zigzag that is any batch with one extend shorter than ``2cp`` (a short prompt, a short
  tail after a prefix hit, the last piece of a chunked request), whatever its other requests.

:func:`max_rank_rows` is the exact maximum over all batches of at most ``m`` tokens; a DeepGEMM
warmup that stops below it leaves Ms that a rank can meet to compile while serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

SPLITS = ("zigzag", "interleave", "none")


def _check(cp: int, split: str) -> None:
    if not isinstance(cp, int) or isinstance(cp, bool) or cp < 1:
        raise ValueError(f"CP size must be a positive int, got {cp!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")


def _round_up(x: int, align: int) -> int:
    return -(-x // align) * align


def cp_applies(extend_lens: Sequence[int], cp: int, split: str) -> bool:
    """Whether SGLang splits this extend batch over the CP ranks (else it runs without CP)."""
    _check(cp, split)
    total = sum(extend_lens)
    if cp == 1 or split == "none" or total <= 0:
        return False
    if split == "interleave":
        return total >= cp
    return total >= 2 * cp and all(n >= 2 * cp for n in extend_lens)


def rank_rows(extend_lens: Sequence[int], cp: int, split: str) -> int:
    """Physical rows each rank runs for one extend batch (all ranks run the same number).

    Args:
        extend_lens: ``(B,)`` extend tokens per request, each >= 1.
        cp: attention CP size.
        split: ``"zigzag"``, ``"interleave"`` or ``"none"``.
    """
    if any(n < 1 for n in extend_lens):
        raise ValueError(f"extend_lens must all be >= 1, got {list(extend_lens)}")
    if not cp_applies(extend_lens, cp, split):
        return sum(extend_lens)
    if split == "interleave":
        return _round_up(-(-sum(extend_lens) // cp), cp)
    seg = 2 * cp
    per_rank = [0] * cp
    for n in extend_lens:
        q, s = divmod(n, seg)
        for r in range(cp):
            per_rank[r] += 2 * q + (r < s) + (seg - 1 - r < s)
    return _round_up(max(per_rank), seg)


def _zigzag_logical_max(m: int, cp: int) -> int:
    """Largest logical zigzag rank length over batches of at most ``m`` tokens, every request
    at least ``2cp`` long (0 if there is none).

    A request ``L = 2cp*q + s`` gives rank ``r`` ``2q + [s > r] + [s >= 2cp - r]`` rows, and
    cutting it into ``2cp + s`` and ``q - 1`` requests of ``2cp`` keeps every rank's rows, so
    batches of requests with ``q = 1`` reach the maximum. For a fixed rank ``r`` each such request
    is one of: ``2cp`` tokens for 2 rows, ``2cp + r + 1`` for 3, or ``4cp - r`` for 4 (the
    shortest ``s`` of each row count). With ``n`` requests and ``S = m - 2cp*n`` spare tokens,
    ``x`` four-row and ``y`` three-row requests fit when ``x + y <= n`` and
    ``(2cp - r) x + (r + 1) y <= S``; the rows are ``2n + 2x + y``.
    """
    seg, best = 2 * cp, 0
    for r in range(cp):
        one, two = r + 1, seg - r  # spare tokens for 1 and for 2 extra rows
        for n in range(1, m // seg + 1):
            spare = m - seg * n
            x_max = min(n, spare // two)
            # 2x + min(n - x, (spare - two*x) // one) is the minimum of an increasing and a
            # monotone function of x: its maximum is at an end or where the two meet.
            meet = (spare - n * one) // (two - one)
            extra = 0
            for x in {0, x_max, meet - 1, meet, meet + 1, meet + 2}:
                if 0 <= x <= x_max:
                    extra = max(extra, 2 * x + min(n - x, (spare - two * x) // one))
            best = max(best, 2 * n + extra)
    return best


@lru_cache(maxsize=256)
def max_rank_rows(m: int, cp: int, split: str, *, cp_only: bool = False) -> int:
    """The most physical rows any rank runs for a forward of at most ``m`` tokens.

    Exact: some batch of at most ``m`` tokens reaches it. Interleave: ``T = m`` gives
    ``roundup(ceil(m / cp), cp)``. Zigzag: a batch with one extend shorter than ``2cp`` runs
    without CP, so ``[m - 1, 1]`` gives every rank ``m`` rows; among batches zigzag does split,
    many requests of ``2cp + 1`` tokens are the worst (rank 0 takes 3 rows of each: 7710
    requests of 17 tokens at cp 8 give 23,130 rows, 23,136 physical).

    Args:
        m: the largest number of tokens in one forward (>= 1).
        cp: attention CP size.
        split: ``"zigzag"``, ``"interleave"`` or ``"none"``.
        cp_only: only batches the strategy splits (0 when there is none).
    """
    _check(cp, split)
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"m must be a positive int (tokens in one forward), got {m!r}")
    if split == "interleave" and cp > 1:
        split_max = _round_up(-(-m // cp), cp) if m >= cp else 0
        without_cp = min(m, cp - 1)
    elif split == "zigzag" and cp > 1:
        logical = _zigzag_logical_max(m, cp)
        split_max = _round_up(logical, 2 * cp) if logical else 0
        without_cp = m
    else:
        split_max, without_cp = 0, m
    return split_max if cp_only else max(split_max, without_cp)
