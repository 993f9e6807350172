"""The two page allocator models on hand-worked cases (page size 4).

``sglang`` is also held equal to SGLang's own radix cache and allocator in
``packages/sglang-integration/tests/test_upstream_allocator.py``; the cases here say the rules
in small numbers, worked out by hand.
"""

from __future__ import annotations

import pytest
from cpkv_validate import ALLOCATORS, CopyOnWriteAllocator, Request, SGLangAllocator
from cpkv_validate.cli import ALLOCATOR_MODES

P = 4


def _run(alloc, req: Request, extend: int) -> None:
    """One prefill step of ``req`` alone: pages, then the checkpoint."""
    alloc.extend([req], [req.cached + extend])
    req.cached += extend
    alloc.commit(req)


def test_the_cli_names_every_allocator():
    assert tuple(ALLOCATORS) == ALLOCATOR_MODES


def test_sglang_hits_whole_pages_of_len_minus_1_only():
    alloc = SGLangAllocator(16, P)
    base = Request("base", list(range(11)))  # pages 1, 2 full; page 3 holds 8..10
    alloc.admit(base)
    assert (base.hit, base.pages) == (0, [])
    _run(alloc, base, 11)
    assert base.pages == [1, 2, 3] and base.protected == 8  # partial page 3 stays base's own
    cases = {
        "mid": ([*range(6), 99], 4, [1]),  # diverges inside page 2: 4 tokens
        "edge": ([*range(8), 99], 8, [1, 2]),  # diverges on the boundary
        "full": (list(range(8)), 4, [1]),  # whole cached prompt of 8: len - 1 = 7 -> 4
        "tiny": ([0, 1, 2], 0, []),  # inside the first page: nothing
    }
    for name, (tokens, hit, pages) in cases.items():
        req = Request(name, tokens)
        alloc.admit(req)
        assert (req.hit, req.cached, req.pages, req.hit_source) == (
            hit,
            hit,
            pages,
            "base" if hit else None,
        ), name


def test_sglang_takes_fresh_pages_from_the_front_in_batch_order():
    alloc = SGLangAllocator(16, P)
    a, b = Request("a", list(range(6))), Request("b", list(range(50, 59)))
    alloc.admit(a)
    alloc.admit(b)
    alloc.extend([a, b], [6, 9])
    assert a.pages == [1, 2] and b.pages == [3, 4, 5]
    assert list(alloc.free)[:2] == [6, 7]


def test_sglang_continues_a_chunk_on_its_own_partial_page():
    alloc = SGLangAllocator(16, P)
    a = Request("a", list(range(14)))
    alloc.admit(a)
    _run(alloc, a, 6)  # positions 0..5 on pages 1, 2 (page 2 half full)
    assert (a.pages, a.protected) == ([1, 2], 4)
    _run(alloc, a, 5)  # 6..7 continue on page 2, 8..10 on a fresh page 3
    assert (a.pages, a.protected) == ([1, 2, 3], 8)


def test_sglang_keeps_the_first_copy_of_a_prefix_computed_twice():
    alloc = SGLangAllocator(16, P)
    a, b = Request("a", [*range(8), 70]), Request("b", [*range(8), 80])
    alloc.admit(a)
    alloc.admit(b)
    alloc.extend([a, b], [9, 9])
    assert (a.pages, b.pages) == ([1, 2, 3], [4, 5, 6])
    for r in (a, b):
        r.cached = 9
        alloc.commit(r)
    assert b.pages == [1, 2, 6] and b.protected == 8  # repointed to a's copy
    assert list(alloc.free)[:3] == [4, 5, 7]  # b's duplicates back at the front, in order


def test_sglang_finish_frees_the_partial_page_and_evict_frees_the_chain():
    alloc = SGLangAllocator(16, P)
    base = Request("base", list(range(8)))
    alloc.admit(base)
    _run(alloc, base, 8)
    a = Request("a", [*range(8), *range(20, 26)])
    alloc.admit(a)  # len - 1 = 13 tokens, whole pages of them cached: 8
    assert a.pages == [1, 2]
    _run(alloc, a, 6)  # pages 3 (full), 4 (2 tokens)
    alloc.finish(a)
    assert alloc.free[0] == 4  # the partial last page; page 3 went into the tree
    alloc.finish(base)
    alloc.evict("a")  # a's own page 3 only: page 2 ends base's entry
    assert list(alloc.free)[:2] == [3, 4]
    alloc.evict("base")
    assert list(alloc.free)[:4] == [1, 2, 3, 4]


def test_sglang_never_evicts_a_locked_path():
    alloc = SGLangAllocator(16, P)
    base, a = Request("base", list(range(8))), Request("a", [*range(8), 9])
    alloc.admit(base)
    _run(alloc, base, 8)
    alloc.finish(base)
    alloc.admit(a)  # locks base's pages
    alloc.evict("base")
    assert 1 not in alloc.free and 2 not in alloc.free


def test_free_shares_the_partial_page_and_copies_it_on_write():
    alloc = CopyOnWriteAllocator(16, P)
    base = Request("base", list(range(11)))
    alloc.admit(base)
    _run(alloc, base, 11)
    assert base.pages == [0, 1, 2]
    a = Request("a", [*range(10), 99])
    alloc.admit(a)
    assert (a.hit, a.pages) == (10, [0, 1, 2])  # token granular, partial page 2 shared
    copies = alloc.before_write(a, 11)
    assert copies == [(2, 3)] and a.pages == [0, 1, 3]


@pytest.mark.parametrize("mode", list(ALLOCATORS))
def test_exhaustion_is_a_clear_error(mode):
    alloc = ALLOCATORS[mode](2, P)
    req = Request("a", list(range(12)))
    alloc.admit(req)
    with pytest.raises(MemoryError, match="KV pool exhausted"):
        alloc.extend([req], [12])
