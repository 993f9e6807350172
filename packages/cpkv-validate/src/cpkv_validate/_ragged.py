"""SGLang 0.5.23's RAGGED top-k offsets under interleave CP, as the reference engine models them.

With a RAGGED top-k transform, a query's top-k entries are positions inside its own request and a
per-row offset moves them to the row where that request starts in the KV that sparse attention
reads. In a batch with no prefix anywhere, that KV is the whole all-gathered current chunk: every
request's tokens, in batch order. Two rules for the offset of a rank's row (``rule``):

- ``upstream`` (SGLang 0.5.23): the rank keeps only the requests it holds a row of and sums the
  sequence lengths of the kept requests before the row's own. A rank that holds no token of an
  earlier request bases a later one too low, so its queries read the earlier request's rows:
  extend lengths ``[1, 6]`` at cp 2 put all three of rank 1's queries on request 0's row.
- ``fixed``: the row's request start in the gathered chunk (the exclusive cumulative extend
  lengths of *all* requests), the rule of the ``ragged-offsets`` hook in sglang-integration.

SGLang takes that branch only when interleave CP is applied to the batch (``cp > 1`` and at least
``cp`` tokens; a smaller batch runs without CP) and no request of it has a prefix; with a prefix
the KV is the kept requests' own page table, built over the same kept requests as the offsets, so
the two agree. Zigzag CP keeps every request on every rank. Outside that branch the reference
engine reads through its own per-request dense layout, which is what SGLang reads there too.

Restated from SGLang, not imported (cpkv-validate runs where SGLang cannot):
``packages/sglang-integration/tests/test_upstream_validate_ragged.py`` holds both rules and the
branch condition equal to SGLang's own metadata and to the hook's rule functions.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RAGGED_RULES", "ragged_chunk_branch", "ragged_offsets"]

#: ``--sglang-offsets`` choices: SGLang 0.5.23's offsets, and the fixed ones.
RAGGED_RULES = ("upstream", "fixed")


def ragged_chunk_branch(
    split: str, cp_size: int, extend_lens: Sequence[int], prefix_lens: Sequence[int]
) -> bool:
    """Whether SGLang's sparse attention reads this batch's gathered chunk through RAGGED offsets.

    Args:
        split: the CP strategy, ``interleave`` or ``zigzag``.
        cp_size: CP ranks.
        extend_lens, prefix_lens: per request, tokens computed now and tokens already cached.

    True for interleave CP applied to the batch (``cp_size > 1``, ``sum(extend_lens) >=
    cp_size``) with no prefix anywhere in it.
    """
    if len(prefix_lens) != len(extend_lens):
        raise ValueError(
            f"prefix_lens has {len(prefix_lens)} entries, extend_lens {len(extend_lens)}; give "
            f"one of each per request"
        )
    total = sum(extend_lens)
    return split == "interleave" and 1 < cp_size <= total and not any(prefix_lens)


def ragged_offsets(extend_lens: Sequence[int], row_requests: Sequence[int], rule: str) -> list[int]:
    """Each of a rank's query rows' base in the gathered chunk, by ``rule``.

    Args:
        extend_lens: (B,) tokens of each request in the chunk (no prefix: a request's sequence
            is its extend).
        row_requests: the request (batch index) of each of the rank's rows, in row order.
        rule: ``upstream`` (SGLang 0.5.23) or ``fixed`` (:data:`RAGGED_RULES`).

    Returns:
        One offset per row. Row ``i`` attends to chunk rows ``offset[i] + p`` for the top-k
        positions ``p`` of its request.
    """
    if rule not in RAGGED_RULES:
        raise ValueError(f"rule must be one of {', '.join(RAGGED_RULES)}, got {rule!r}")
    bad = [b for b in row_requests if not 0 <= b < len(extend_lens)]
    if bad:
        raise ValueError(
            f"row_requests names request {bad[0]} but the batch has {len(extend_lens)}; give "
            f"batch indices of the rank's rows"
        )
    kept = range(len(extend_lens)) if rule == "fixed" else sorted(set(row_requests))
    base, acc = {}, 0
    for b in kept:
        base[b] = acc
        acc += extend_lens[b]
    return [base[b] for b in row_requests]
