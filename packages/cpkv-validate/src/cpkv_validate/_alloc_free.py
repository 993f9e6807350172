"""``--allocator free``: token-granular prefix sharing, partial pages shared and copied on write.

A new request reuses the pages of the longest cached token prefix, *including a partially
filled last page*: its first current tokens then land on a page that other requests also list
(they read rows the new request does not). That is the physical page sharing under which a
value-keyed inverse goes wrong. The pool stays consistent by copy-on-write at cache-write time
(:meth:`CopyOnWriteAllocator.before_write`): during the step the writer's private dense slot is
the copy. Engines that share partial pages this way exist (SGLang's does not: see
``_alloc_sglang``), and this is where the legacy inverse fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._pool import Request

__all__ = ["CopyOnWriteAllocator", "PrefixCache"]


def _pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


class PrefixCache:
    """Token-prefix -> pages, one entry per request (updated after each of its steps).

    Each entry holds a reference on its pages, so a finished request's prefix stays reusable
    until :meth:`evict` drops it.
    """

    def __init__(self, alloc: CopyOnWriteAllocator, enabled: bool = True) -> None:
        self.alloc, self.enabled = alloc, enabled
        self.entries: dict[str, tuple[tuple[int, ...], list[int]]] = {}

    def match(self, tokens: list[int]) -> tuple[int, list[int], str | None]:
        """Longest cached prefix of ``tokens`` (at most ``len - 1``: one token is always computed).

        Returns:
            (length, pages covering it, name of the entry) — (0, [], None) on a miss.
        """
        best, pages, src = 0, [], None
        if not self.enabled:
            return best, pages, src
        limit = len(tokens) - 1
        for name, (toks, pgs) in self.entries.items():
            n = 0
            for a, b in zip(toks[:limit], tokens, strict=False):
                if a != b:
                    break
                n += 1
            if n > best:
                best, src = n, name
                pages = pgs[: _pages_for(n, self.alloc.page_size)]
        return best, list(pages), src

    def put(self, name: str, tokens: list[int], pages: list[int]) -> None:
        if not self.enabled:
            return
        for p in pages:
            self.alloc.incref(p)
        self.evict(name)
        self.entries[name] = (tuple(tokens), list(pages))

    def evict(self, name: str) -> None:
        old = self.entries.pop(name, None)
        if old is not None:
            for p in old[1]:
                self.alloc.decref(p)

    def holds(self, name: str, page: int) -> bool:
        entry = self.entries.get(name)
        return entry is not None and page in entry[1]


class CopyOnWriteAllocator:
    """Reference-counted pages, a token-granular :class:`PrefixCache`, copy-on-write.

    Args:
        num_pages: pages it hands out (all of them: ``num_rows == num_pages``).
        page_size: tokens per page.
        prefix_cache: share prefixes between requests (off for the batch-size-1 golden runs).

    Freed pages go to the front of the free list (LIFO), so eviction churn hands a page with a
    previous owner's KV straight to the next request; nothing is zeroed.
    """

    mode = "free"

    def __init__(self, num_pages: int, page_size: int, prefix_cache: bool = True) -> None:
        self.num_pages = self.num_rows = num_pages
        self.page_size = page_size
        self.free = list(range(num_pages - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self.ref = [0] * num_pages
        self.cache = PrefixCache(self, enabled=prefix_cache)

    # -- pages ---------------------------------------------------------------------------------
    def alloc(self) -> int:
        if not self.free:
            raise MemoryError(
                f"KV pool exhausted: all {self.num_pages} pages are held; fix: raise num_pages "
                f"or evict cached prefixes"
            )
        page = self.free.pop()
        self.ref[page] = 1
        return page

    def incref(self, page: int) -> None:
        self.ref[page] += 1

    def decref(self, page: int) -> None:
        self.ref[page] -= 1
        if self.ref[page] == 0:
            self.free.append(page)

    def num_free(self) -> int:
        return len(self.free)

    def cached_names(self) -> list[str]:
        return list(self.cache.entries)

    # -- request lifecycle ---------------------------------------------------------------------
    def admit(self, req: Request) -> None:
        """Reuse the pages of the longest cached token prefix, partial last page included."""
        req.hit, req.pages, req.hit_source = self.cache.match(req.tokens)
        req.cached = req.hit
        for p in req.pages:
            self.incref(p)

    def extend(self, reqs: Sequence[Request], seq_lens: Sequence[int]) -> None:
        """Give each request pages for every position below its new length, in batch order."""
        for r, n in zip(reqs, seq_lens, strict=True):
            while len(r.pages) < _pages_for(n, self.page_size):
                r.pages.append(self.alloc())

    def before_write(self, req: Request, end: int) -> list[tuple[int, int]]:
        """Copy-on-write every page ``req`` is about to write (positions ``cached..end``) that
        someone else also holds.

        Returns:
            (src, dst) page copies the engine makes in its storage before writing.
        """
        p, copies = self.page_size, []
        for j in range(req.cached // p, _pages_for(end, p)):
            page = req.pages[j]
            others = self.ref[page] - 1 - int(self.cache.holds(req.name, page))
            if others > 0:
                new = self.alloc()
                copies.append((page, new))
                self.decref(page)
                req.pages[j] = new
        return copies

    def commit(self, req: Request) -> None:
        """After a step: cache the request's computed prefix (the partial last page too)."""
        used = _pages_for(req.cached, self.page_size)
        self.cache.put(req.name, req.tokens[: req.cached], req.pages[:used])

    def finish(self, req: Request) -> None:
        """Drop the live request; its prefix stays in the cache until evicted."""
        for p in req.pages:
            self.decref(p)

    def evict(self, name: str) -> None:
        """Drop a cached prefix; pages nobody else holds return to the allocator."""
        self.cache.evict(name)
