"""The legacy value-keyed scheme, kept only as a test fixture (docs/design.md, "Invariants", 4).

``inverse[page] = slot`` is 1-D and last-writer-wins over the batch; the legacy "current page"
mask is keyed by page value the same way. Both are right at batch size 1 and wrong when two
requests of one batch list the same physical page.
"""

from __future__ import annotations

import _oracle
import torch


def legacy_inverse(req_pages, prefix, extend, page_size, num_pages) -> tuple[list[int], list[int]]:
    """One slot per used (b, j) in row-major order; ``inverse[page] = slot``, last writer wins.

    Returns:
        (inverse over pages, slot_page).
    """
    inverse, slot_page = [-1] * num_pages, []
    for b, row in enumerate(req_pages):
        for j in range(_oracle.pages_used(prefix[b], extend[b], page_size)):
            inverse[row[j]] = len(slot_page)
            slot_page.append(row[j])
    return inverse, slot_page


def legacy_current_page_mask(req_pages, prefix, extend, page_size, num_pages) -> list[list[bool]]:
    """``mask[page] = is_current(b, j)``, last writer wins, read back per (b, j) by page value."""
    by_page = [False] * num_pages
    for b, row in enumerate(req_pages):
        for j in range(_oracle.pages_used(prefix[b], extend[b], page_size)):
            by_page[row[j]] = _oracle.is_written(prefix[b], extend[b], page_size, j)
    return [
        [
            j < _oracle.pages_used(prefix[b], extend[b], page_size) and by_page[row[j]]
            for j in range(len(row))
        ]
        for b, row in enumerate(req_pages)
    ]


def legacy_reads(req_pages, prefix, extend, page_size, num_pages, kv_pool, current_kv):
    """Run the legacy pipeline; return {(b, i): row} as each request reads its sequence.

    materialize every slot, fill current tokens through the 1-D inverse, read through it.
    """
    inverse, slot_page = legacy_inverse(req_pages, prefix, extend, page_size, num_pages)
    dense = [kv_pool[p].clone() for p in slot_page]
    _, _, locs = _oracle.current_tokens(req_pages, prefix, extend, page_size)
    for t, loc in enumerate(locs):
        dense[inverse[loc // page_size]][loc % page_size] = current_kv[t]
    return {
        (b, i): dense[inverse[req_pages[b][i // page_size]]][i % page_size]
        for b in range(len(req_pages))
        for i in range(prefix[b] + extend[b])
    }


def legacy_mask_reads(req_pages, prefix, extend, page_size, num_pages, kv_pool, current_kv):
    """Plan with the value-keyed mask deciding private vs shared slots, then read per request."""
    mask = legacy_current_page_mask(req_pages, prefix, extend, page_size, num_pages)
    lay = _oracle.plan(
        req_pages, prefix, extend, page_size, num_pages, written=lambda b, j: mask[b][j]
    )
    dense = _oracle.materialize(kv_pool, lay)
    reqs, _, locs = _oracle.current_tokens(req_pages, prefix, extend, page_size)
    _oracle.fill_current(dense, current_kv, reqs, locs, lay)
    return {
        (b, i): dense[lay.slot_table[b][i // page_size]][i % page_size]
        for b in range(len(req_pages))
        for i in range(prefix[b] + extend[b])
    }


def first_violation(reads, req_pages, prefix, extend, page_size, kv_pool, current_kv):
    """The first (b, i) whose read differs from invariant 1's truth, or None."""
    reqs, poss, _ = _oracle.current_tokens(req_pages, prefix, extend, page_size)
    token_index = {(b, i): t for t, (b, i) in enumerate(zip(reqs, poss, strict=True))}
    for (b, i), row in reads.items():
        want = _oracle.truth_row(
            b, i, req_pages, prefix, page_size, kv_pool, current_kv, token_index
        )
        if not torch.equal(row, want):
            return b, i
    return None
