"""Hypothesis strategies: random batches with heavy page sharing and boundary-biased lengths.

A small pool and a common "radix" chain that every request may start with make requests share
pages often, read-only and written alike; lengths cluster on page boundaries (k*P - 1, k*P,
k*P + 1); extends of 0 and -1 padding / stale page ids past the used pages are common.
"""

from __future__ import annotations

from _scenarios import Batch
from hypothesis import strategies as st


def _near_boundaries(draw, low: int, high: int, page_size: int) -> int:
    """An int in [low, high], often a multiple of P or one off it."""
    if low >= high:
        return low
    pick = draw(st.sampled_from(["any", "edge", "edge", "ends"]))
    if pick == "ends":
        return draw(st.sampled_from([low, high]))
    if pick == "edge":
        k = draw(st.integers(low // page_size, high // page_size + 1))
        value = k * page_size + draw(st.sampled_from([-1, 0, 0, 1]))
        return min(max(value, low), high)
    return draw(st.integers(low, high))


@st.composite
def batches(draw, max_batch: int = 6, page_sizes=(1, 2, 3, 4, 8, 8, 16)) -> Batch:
    page_size = draw(st.sampled_from(page_sizes))
    num_pages = draw(st.integers(1, 12))
    bsz = draw(st.integers(1, max_batch))
    chain = draw(st.permutations(range(num_pages)))
    rows, prefix, extend = [], [], []
    for _ in range(bsz):
        share = draw(st.integers(0, num_pages))
        rest = [p for p in draw(st.permutations(range(num_pages))) if p not in chain[:share]]
        pages = list(chain[:share]) + rest
        seq = _near_boundaries(draw, 0, num_pages * page_size, page_size)
        pre = _near_boundaries(draw, 0, seq, page_size)
        if draw(st.integers(0, 5)) == 0:  # empty extend
            pre = seq
        used = -(-seq // page_size)
        rows.append(pages[:used])
        prefix.append(pre)
        extend.append(seq - pre)
    width = max(len(r) for r in rows) + draw(st.integers(0, 2))
    stale = draw(st.booleans())
    padded = []
    for row in rows:
        tail = [
            draw(st.integers(0, num_pages - 1)) if stale else -1 for _ in range(width - len(row))
        ]
        padded.append(row + tail)
    return Batch("hypothesis", padded, prefix, extend, page_size, num_pages)
